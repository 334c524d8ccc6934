"""``parlai empathy_word_table --dict-file DICT --method distill --out FOLDER``: a word table for
a model's dictionary, as wide as the model, built offline from what is installed.

A substitute for the papers' 300-d GloVe (see ``parlai_empathy/models/word_table.py`` for the
methods). The generators take the folder as ``--glove-path FOLDER``; its files' sha256 are checked
on every load. A table already in FOLDER, built the same way from the same dictionary, is reused.
"""

from parlai.core.params import ParlaiParser
from parlai.core.script import register_script

from parlai_empathy.data.file_errors import exit_on_data_errors
from parlai_empathy.files.offline_models import OFFLINE_MINILM, encoder_choices, resolve_encoder
from parlai_empathy.integration.commands import EmpathyScript
from parlai_empathy.models import word_table


@register_script('empathy_word_table')
class EmpathyWordTable(EmpathyScript):
    @classmethod
    def setup_args(cls):
        parser = ParlaiParser(
            True,
            False,
            'Build a word table for a dictionary from offline vectors '
            '(a substitute for 300-d GloVe; pass it as --glove-path FOLDER)',
        )
        parser.add_argument(
            '--dict-file',
            '-df',
            type=str,
            required=True,
            help="the model's ParlAI dictionary (e.g. from parlai build_dict -m MODEL -t TASK -df F)",
        )
        parser.add_argument(
            '--method',
            choices=word_table.METHODS,
            default='distill',
            help='distill: each word encoded alone by --encoder, PCA to --dim; glove_distill: '
            "GloVe 6B 50d's columns, then the distillation; glove_orthogonal: GloVe 6B 50d mapped "
            'to --dim by a fixed random orthogonal map (a control)',
        )
        parser.add_argument(
            '--out',
            type=str,
            required=True,
            help="the table's folder (outside any checkout); reused when built the same way",
        )
        parser.add_argument('--dim', type=int, default=300, help="columns: the model's embedding size")
        parser.add_argument(
            '--encoder',
            type=str,
            default=OFFLINE_MINILM,
            help=f"the distilling methods' sentence encoder: {encoder_choices('--encoder')}",
        )
        parser.add_argument('--seed', type=int, default=0, help='glove_orthogonal: the seed of its map')
        parser.add_argument('--batch-size', type=int, default=256, help='words per encoder batch')
        parser.add_argument(
            '--threads',
            type=int,
            default=0,
            help='torch threads (0: torch default); a rebuild gives the same bytes with the same '
            'thread count (others differ by float rounding)',
        )
        return parser

    def run(self):
        import torch

        opt = self.opt
        if opt['threads'] > 0:
            torch.set_num_threads(opt['threads'])
        distilling = opt['method'] in word_table.DISTILLING
        encoder_dir = resolve_encoder(opt['encoder'], opt.get('datapath'), '--encoder') if distilling else None
        # a dictionary file it cannot use ends the command with its one-line message
        with exit_on_data_errors():
            out, built = word_table.build(
                opt['dict_file'],
                opt['method'],
                opt['out'],
                opt['dim'],
                opt['encoder'],
                encoder_dir,
                opt['seed'],
                opt['batch_size'],
            )
        print(f'{"built" if built else "reused"} the word table {out}; train with --glove-path {out}')
        return out
