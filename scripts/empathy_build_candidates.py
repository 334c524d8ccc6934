"""``parlai empathy_build_candidates``: write Rashkin et al.'s retrieval pool, one response a line.

The pool is every deduplicated listener response of ED train (cleaned reading), keeping those of
at most ``--max-tokens`` tokens (20 in Rashkin et al.'s code; 0 keeps all). Pass the file to
``-m empathy/bert_ranker --eval-candidates fixed --fixed-candidates-path FILE``.
"""
from parlai_empathy import compat

compat.apply()

from parlai.core.params import ParlaiParser  # noqa: E402
from parlai.core.script import ParlaiScript, register_script  # noqa: E402

from parlai_empathy.data import response_pool  # noqa: E402


@register_script('empathy_build_candidates')
class EmpathyBuildCandidates(ParlaiScript):
    @classmethod
    def setup_args(cls):
        parser = ParlaiParser(False, False, 'Build the ED train listener-response pool for fixed-candidate retrieval')
        parser.add_argument('--ed-datapath', type=str, default=None,
                            help='ED folder or "sample" (default: PARLAI_EMPATHY_ED_DIR)')
        parser.add_argument('-o', '--outfile', type=str, required=True, help='candidate file to write')
        parser.add_argument('--max-tokens', type=int, default=response_pool.RASHKIN_MAX_TOKENS,
                            help='keep responses of at most this many tokens (0 = all)')
        return parser

    def run(self):
        train_csv = response_pool.train_csv_path(self.opt.get('ed_datapath'))
        responses = response_pool.listener_responses(train_csv, self.opt['max_tokens'])
        response_pool.write_pool(responses, self.opt['outfile'])
        print(f'{len(responses)} responses from {train_csv} written to {self.opt["outfile"]}')
        return responses


if __name__ == '__main__':
    EmpathyBuildCandidates.main()
