"""``parlai empathy_build_candidates``: write Rashkin et al.'s retrieval pool, one response a line.

The pool is every deduplicated listener response of ED train (cleaned reading), keeping those of
at most ``--max-tokens`` tokens (20 in Rashkin et al.'s code; 0 keeps all). Pass the file to
``-m empathy/bert_ranker --eval-candidates fixed --fixed-candidates-path FILE``. Without
``--outfile`` the pool goes to ``--outdir`` under the name every tool shares
(:func:`~parlai_empathy.data.response_pool.ensure_pool`: train.csv checksum and token limit in
it), and an existing one is reused.
"""

from parlai.core.params import ParlaiParser
from parlai.core.script import register_script

from parlai_empathy.data import response_pool
from parlai_empathy.data.file_errors import exit_on_data_errors
from parlai_empathy.integration.commands import EmpathyScript


@register_script('empathy_build_candidates')
class EmpathyBuildCandidates(EmpathyScript):
    @classmethod
    def setup_args(cls):
        parser = ParlaiParser(False, False, 'Build the ED train listener-response pool for fixed-candidate retrieval')
        parser.add_argument(
            '--ed-datapath', type=str, default=None, help='ED folder or "sample" (default: PARLAI_EMPATHY_ED_DIR)'
        )
        parser.add_argument(
            '-o', '--outfile', type=str, default=None, help='candidate file to write (rewritten every time)'
        )
        parser.add_argument(
            '--outdir', type=str, default='.', help='without --outfile: folder of the shared, checksum-named pool file'
        )
        parser.add_argument(
            '--max-tokens',
            type=int,
            default=response_pool.RASHKIN_MAX_TOKENS,
            help='keep responses of at most this many tokens (0 = all)',
        )
        return parser

    def run(self):
        # a missing or unreadable file ends the command with its one-line message
        with exit_on_data_errors():
            return self._build()

    def _build(self):
        ed_dir, max_tokens = self.opt.get('ed_datapath'), self.opt['max_tokens']
        train_csv = response_pool.train_csv_path(ed_dir)
        if self.opt.get('outfile'):
            path = response_pool.write_pool(
                response_pool.listener_responses(train_csv, max_tokens), self.opt['outfile']
            )
        else:
            path = response_pool.ensure_pool(ed_dir, max_tokens, self.opt['outdir'])
        # an existing pool is reused by name: read it back as any candidate file is read
        responses = response_pool.read_candidates(path)
        print(f'{len(responses)} responses from {train_csv} in {path}')
        return responses


if __name__ == '__main__':
    EmpathyBuildCandidates.main()
