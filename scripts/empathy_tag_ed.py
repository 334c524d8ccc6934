"""``parlai empathy_tag_ed -mf <classifier>``: tag every ED utterance with emotion labels.

The classifier is a multi-label GoEmotions one (Metz & You's interaction patterns) or a
single-label ED 32-way one (ETHREED's listener emotions, ``--listener-emotions <cache folder>``).

Probabilities and thresholded labels go to a versioned cache beside ParlAI's built data
(``<datapath>/empathy_ed_goemotions/``), keyed by classifier and data checksum. A killed run
resumes where it stopped; a finished cache is reused as is.
"""

from parlai.core.params import ParlaiParser
from parlai.core.script import register_script

from parlai_empathy.data import ed_source
from parlai_empathy.data.file_errors import exit_on_data_errors
from parlai_empathy.emotions import tag_cache
from parlai_empathy.emotions.classifier_files import default_device, load_classifier
from parlai_empathy.emotions.label_check import check_tagging_classifier
from parlai_empathy.integration.commands import EmpathyScript
from parlai_empathy.integration.safe_loading import add_trust_flag
from parlai_empathy.models.precision import bf16_option, resolve_bf16


@register_script('empathy_tag_ed')
class EmpathyTagED(EmpathyScript):
    @classmethod
    def setup_args(cls):
        parser = ParlaiParser(
            True, False, 'Tag every ED utterance with a GoEmotions or ED 32-way classifier (resumable cache)'
        )
        parser.add_argument('-mf', '--model-file', type=str, required=True, help='a trained empathy/emotion_classifier')
        parser.add_argument('--ed-datapath', type=str, default=None, help='as for empathy_ed_clean')
        parser.add_argument('--goemotions-datapath', type=str, default=None, help='to check the label set (optional)')
        parser.add_argument('--tag-cache-dir', type=str, default=None, help='default: <datapath>/empathy_ed_goemotions')
        parser.add_argument('--batch-tokens', type=int, default=4096, help='padded tokens per forward batch')
        parser.add_argument('--chunk-size', type=int, default=4096, help='utterances per resumable cache chunk')
        parser.add_argument('--max-chunks', type=int, default=None, help='stop after this many new chunks')
        parser.add_argument(
            '--bf16',
            type=bf16_option,
            default=False,
            help='bfloat16 autocast: true, false or auto (where the CPU has AVX-512 BF16 or AMX, '
            'or the GPU supports it: about 2x faster there, several times slower where emulated); '
            'the resolved precision is recorded in the cache',
        )
        parser.add_argument('--threads', type=int, default=0, help='torch threads (0: torch default)')
        parser.add_argument(
            '--export-labels',
            type=str,
            default=None,
            help="ED 32-way classifiers: also write each utterance's top emotion to this folder "
            '(labels.csv.gz + meta.json, about 1.4 MB for all of ED), which ETHREED takes as '
            '--listener-emotions on any machine, without the tag cache',
        )
        # the classifier is read weights-only; -mf of another agent is refused, even while parsing
        return add_trust_flag(parser, opt_in=False)

    def run(self):
        # a missing or unreadable file ends the command with its one-line message
        with exit_on_data_errors():
            return self._run()

    def _run(self):
        import torch

        if self.opt['threads'] > 0:
            torch.set_num_threads(self.opt['threads'])
        ed_dir = ed_source.resolve_ed_dir(self.opt.get('ed_datapath'), self.opt.get('datapath'))
        classifier = load_classifier(self.opt['model_file'], default_device())
        check_tagging_classifier(
            classifier.classes, classifier.multilabel, self.opt['model_file'], self.opt.get('goemotions_datapath')
        )
        run = tag_cache.tag_ed(
            self.opt['model_file'],
            ed_dir,
            tag_cache.default_root(self.opt['datapath'], self.opt.get('tag_cache_dir')),
            chunk_size=self.opt['chunk_size'],
            batch_tokens=self.opt['batch_tokens'],
            max_chunks=self.opt['max_chunks'],
            classifier=classifier,
            bf16=resolve_bf16(self.opt['bf16'], use_cuda=default_device() == 'cuda'),
        )
        state = 'complete' if run.reused + run.tagged == run.total else 'partial (run again to resume)'
        print(
            f'tag cache: {run.directory}\n{run.total} utterances: {run.reused} already tagged, '
            f'{run.tagged} tagged now, '
            f'{run.empty} empty; cache {state}'
        )
        if self.opt.get('export_labels'):
            if state != 'complete':
                raise RuntimeError(f'--export-labels needs a complete tag cache; {run.directory} is partial: run again')
            import shlex
            import sys

            from parlai_empathy.emotions import listener_labels

            meta = listener_labels.export(
                run.directory,
                ed_dir,
                self.opt['export_labels'],
                command='parlai ' + ' '.join(shlex.quote(a) for a in sys.argv[1:]),
            )
            print(
                f'listener labels: {self.opt["export_labels"]} ({meta["counts"]["utterances"]} utterances, '
                f'sha256 {meta["sha256"][:12]})'
            )
        return run


if __name__ == '__main__':
    EmpathyTagED.main()
