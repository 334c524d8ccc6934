#!/usr/bin/env python3
"""``parlai empathy_tune_thresholds -mf M``: per-label thresholds of a GoEmotions tagger, tuned on dev.

Runs the trained multi-label classifier over the GoEmotions dev split, chooses each label's
threshold to maximise that label's F1 (``parlai_empathy/emotions/thresholds.py``), and stores
them with the model: in ``M.opt`` (``multilabel_thresholds``, used by the agent, ``eval_model``
and ``empathy_tag_ed`` under the default ``--threshold-scheme tuned``) and, with the dev figures
before and after, in ``M.thresholds.json``.

    parlai empathy_tune_thresholds -mf runs/goemotions/model
"""

import json

from parlai.core.params import ParlaiParser
from parlai.core.script import register_script

from parlai_empathy.integration.commands import EmpathyScript
from parlai_empathy.integration.safe_loading import add_trust_flag


@register_script('empathy_tune_thresholds')
class EmpathyTuneThresholds(EmpathyScript):
    @classmethod
    def setup_args(cls):
        parser = ParlaiParser(True, False, 'Tune per-label thresholds of a multi-label emotion tagger on dev')
        parser.add_argument('-mf', '--model-file', required=True, help='a trained -m empathy/emotion_classifier')
        parser.add_argument('--goemotions-datapath', default=None, help='as for the GoEmotions teacher')
        parser.add_argument('--split', default='valid', choices=['valid', 'train'], help='where to tune')
        # the classifier is read weights-only; -mf of another agent is refused, even while parsing
        return add_trust_flag(parser, opt_in=False)

    def run(self):
        import numpy as np

        from parlai_empathy.data import goemotions
        from parlai_empathy.emotions import inference, thresholds
        from parlai_empathy.emotions.classifier_files import default_device, load_classifier

        opt = self.opt
        model_file = opt['model_file']
        classifier = load_classifier(model_file, default_device())
        if not classifier.multilabel:
            raise ValueError(f'{model_file} is a single-label classifier: it has no thresholds to tune')
        folder = goemotions.resolve_dir(opt.get('goemotions_datapath'), opt.get('datapath'))
        names = goemotions.read_taxonomy(folder).names
        examples = goemotions.read_split(folder, opt['split'])
        column = {name: i for i, name in enumerate(classifier.classes)}
        gold = np.zeros((len(examples), len(classifier.classes)), dtype=bool)
        for row, example in enumerate(examples):
            for label_id in example.label_ids:
                if names[label_id] not in column:
                    raise ValueError(f'{model_file} does not know the GoEmotions label {names[label_id]!r}')
                gold[row, column[names[label_id]]] = True
        probs, _ = inference.predict_all(classifier, [e.text for e in examples])
        tuned = thresholds.tune(probs, gold)
        report = thresholds.summary(classifier.classes, probs, gold, tuned)
        report.update(split=opt['split'], examples=len(examples))
        with open(model_file + '.opt', encoding='utf-8') as f:
            model_opt = json.load(f)
        model_opt['multilabel_thresholds'] = [float(t) for t in tuned]
        with open(model_file + '.opt', 'w', encoding='utf-8') as f:
            json.dump(model_opt, f, indent=4)
        with open(model_file + '.thresholds.json', 'w', encoding='utf-8') as f:
            json.dump(report, f, indent=1, sort_keys=True)
        print(
            f'{opt["split"]} macro-F1: {report["macro_f1_single"]:.4f} at 0.3 -> {report["macro_f1_tuned"]:.4f} '
            f'with per-label thresholds ({len(examples)} examples); stored in {model_file}.opt'
        )
        for name, row in report['labels'].items():
            print(
                f'  {name:15s} threshold {row["threshold"]:.2f}  F1 {row["f1_single"]:.3f} -> {row["f1_tuned"]:.3f}'
                f'  (support {row["support"]})'
            )
        return report


if __name__ == '__main__':
    EmpathyTuneThresholds.main()
