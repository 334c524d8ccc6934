#!/usr/bin/env python3
"""``parlai empathy_score``: score saved model outputs with parlai-empathy's metric suite.

Reads ``eval_model --world-logs`` JSONL, a ``context<TAB>gold<TAB>response`` TSV, or a test-output
file another ED paper released (``--outputs-format``, or ``--released NAME`` for the files this
package knows, fetched at their pinned commit and checked by sha256), and scores it with the same
code the agents use inside ``eval_model`` (``parlai_empathy.metrics.suite``) plus the figures
that set it beside the papers' own definitions (lowercased AVG BLEU, Distinct-n on nltk tokens,
reply length, distinct replies). A released file, or any file with ``--align-ed true``, is first
aligned with the ED test examples (matched, ambiguous, unmatched and duplicate outputs counted)
and scored against the same gold replies as our rows; ``--emotion-classifier MF`` adds the
emotion that classifier detects in each reply against the gold emotion. Prints a table with the
sacrebleu signatures and the BERTScore model/layer; ``--json-out`` writes the report,
``--artifacts DIR --entry NAME`` a board row's evidence.

    parlai empathy_score -o outputs.tsv --bertscore-model minilm --align-ed true
    parlai empathy_score --released moel --bertscore-model minilm --emotion-classifier CLASSIFIER
    parlai empathy_score --released list
"""

import json
import shlex
import sys

from parlai.core.params import ParlaiParser
from parlai.core.script import register_script

from parlai_empathy.integration.commands import EmpathyScript


def setup_args(parser=None):
    if parser is None:
        parser = ParlaiParser(False, False, 'Score saved model outputs with the parlai-empathy metric suite')
    group = parser.add_argument_group('empathy_score')
    from parlai_empathy.metrics.bertscore import add_bertscore_options
    from parlai_empathy.metrics.released import FORMATS, RELEASED_ENV

    group.add_argument(
        '-o',
        '--outputs',
        default=None,
        help='world-log JSONL, context/gold/response TSV, or a released file (--outputs-format)',
    )
    group.add_argument(
        '--outputs-format',
        default='auto',
        choices=['auto', 'world_logs', 'tsv'] + sorted(FORMATS),
        help='auto: .jsonl/.json are world logs, anything else TSV; the others are released files of other papers',
    )
    group.add_argument(
        '--released',
        default=None,
        help='a released file this package knows, by name ("list" lists them): fetched from GitHub at '
        'its pinned commit and checked by sha256 (instead of -o)',
    )
    group.add_argument(
        '--released-dir',
        default=None,
        help=f'where released files are kept (default: ${RELEASED_ENV}, else ~/.cache/parlai-empathy/released)',
    )
    group.add_argument(
        '--align-ed',
        type='bool',
        default=None,
        help='match every output with its ED test example by context and score it against that '
        "example's gold (default: true for released formats, false for world logs and TSV)",
    )
    group.add_argument(
        '--ed-datapath',
        default=None,
        help='the ED folder for --align-ed (default: $PARLAI_EMPATHY_ED_DIR; "sample": the embedded sample)',
    )
    group.add_argument(
        '--emotion-classifier',
        default=None,
        help='model file of a single-label ED emotion classifier of ours: the emotion it detects '
        'in each reply is compared with the gold emotion (reply_emotion_acc)',
    )
    add_bertscore_options(group)
    group.add_argument('--json-out', default=None, help='also write the report here as JSON')
    group.add_argument(
        '--artifacts',
        default=None,
        help="write a board row's evidence into ARTIFACTS/ENTRY (report, alignment, per-example "
        'figures, meta; not the replies): a published row of projects/<paper>/table.json',
    )
    group.add_argument('--entry', default=None, help='the row name for --artifacts (default: the --released name)')
    group.add_argument(
        '--compare',
        nargs='+',
        default=None,
        metavar='[NAME=]ROW',
        help='test entries against each other on the test examples they share: each a row folder '
        '(projects/<paper>/runs/<row>) or its outputs.jsonl.gz; every pair, every figure both '
        "have: McNemar's exact test for accuracies, the paired bootstrap for the rest, Holm's "
        'adjustment over all the tests of the command',
    )
    group.add_argument(
        '--compare-metrics',
        default=None,
        help='comma-separated figures for --compare (default: every figure the entries share)',
    )
    group.add_argument('--resamples', type=int, default=1000, help='bootstrap resamples for --compare')
    group.add_argument('--seed', type=int, default=0, help='bootstrap seed for --compare')
    group.add_argument(
        '--item-statistics-only',
        type='bool',
        default=False,
        help="with --artifacts: keep the row's evidence and add to its outputs.jsonl.gz the "
        'per-example statistics the bootstrap and --compare need (BLEU counts, n-gram ids, '
        "reply ids), from the row's own released file; then `parlai empathy_leaderboard "
        '--from-artifacts projects --intervals` recomputes its intervals',
    )
    return parser


@register_script('empathy_score', hidden=False)
class EmpathyScore(EmpathyScript):
    @classmethod
    def setup_args(cls):
        return setup_args()

    def run(self):
        from parlai_empathy.data.file_errors import DataSourceError
        from parlai_empathy.metrics.released import ReleasedFileError

        try:
            return self._run()
        except (ValueError, ReleasedFileError, DataSourceError) as err:
            # a file that is not what it should be: the message names it (file, line, field)
            raise SystemExit(f'empathy_score: {err}') from None

    def _run(self):
        from parlai_empathy.metrics import released as rel

        opt = self.opt
        if opt['compare']:
            return self._compare()
        if opt['released'] == 'list':
            for name, known in sorted(rel.KNOWN.items()):
                print(f'{name}: {known.label}; {known.repo}@{known.commit[:7]}:{known.path} ({known.format})')
            return {}
        known = None
        if opt['released']:
            if opt['released'] not in rel.KNOWN:
                raise SystemExit(
                    f'--released {opt["released"]}: not a known released file (known: '
                    f'{", ".join(sorted(rel.KNOWN))}; "list" describes them)'
                )
            if opt['outputs']:
                raise SystemExit('give -o/--outputs or --released, not both')
            known = rel.KNOWN[opt['released']]
            path, fmt = rel.fetch_released(known, opt['released_dir']), known.format
        elif opt['outputs']:
            path, fmt = opt['outputs'], opt['outputs_format']
        else:
            raise SystemExit('give -o/--outputs FILE or --released NAME')
        align = opt['align_ed'] if opt['align_ed'] is not None else fmt in rel.FORMATS
        if fmt in rel.FORMATS and not align:
            raise SystemExit(
                f'--outputs-format {fmt}: a released file has no gold of the ED text our rows are scored '
                'on; it is always aligned (--align-ed true)'
            )
        if opt['artifacts'] and not align:
            raise SystemExit('--artifacts writes a published row, which is aligned with ED test: add --align-ed true')
        from parlai_empathy.metrics.bertscore import bertscore_from_opt

        scorer = bertscore_from_opt(opt)
        if align:
            report = self._aligned(path, fmt, known, scorer)
        else:
            report = self._plain(path, fmt, scorer)
        print(report.table())
        if opt['json_out']:
            with open(opt['json_out'], 'w', encoding='utf-8') as f:
                json.dump(report.to_dict(), f, indent=2)
            print(f'report written to {opt["json_out"]}')
        return report.to_dict()

    def _compare(self):
        from parlai_empathy.leaderboard.formatting import figure
        from parlai_empathy.leaderboard.rows import read_entry_rows
        from parlai_empathy.metrics import bootstrap

        opt = self.opt
        if len(opt['compare']) < 2:
            raise SystemExit('--compare needs at least two entries')
        if opt['resamples'] < 1:
            raise SystemExit('--resamples must be at least 1')
        entries = []
        for item in opt['compare']:
            name, _, path = item.rpartition('=')
            path = path.rstrip('/')
            entries.append((name or path.replace('/outputs.jsonl.gz', ''), read_entry_rows(path)))
        keys = [k.strip() for k in opt['compare_metrics'].split(',')] if opt['compare_metrics'] else None
        unknown = sorted(set(keys or []) - set(bootstrap.FIGURES))
        if unknown:
            raise SystemExit(
                f'--compare-metrics {",".join(unknown)}: no per-example statistic (known: '
                f'{", ".join(bootstrap.FIGURES)})'
            )
        tests = bootstrap.compare(entries, keys, opt['resamples'], opt['seed'])
        if not tests:
            raise SystemExit('the entries share no test example with a figure both have')
        print(
            f'{len(tests)} tests; paired bootstrap: {opt["resamples"]} resamples, seed {opt["seed"]}; '
            "McNemar: exact binomial test of the discordant pairs; p (Holm): Holm's adjustment over all "
            f'{len(tests)} tests; difference = A - B on the examples both have\n'
        )
        print(
            '| A | B | figure | examples | A | B | difference | 95 % interval | test | p | p (Holm) | '
            'A only / B only | odds ratio |'
        )
        print('|---' * 13 + '|')
        for t in tests:
            discordant = '' if t.a_only is None else f'{t.a_only} / {t.b_only}'
            odds = '' if t.odds_ratio is None else figure(t.odds_ratio)
            print(
                f'| {t.a} | {t.b} | {t.metric} | {t.examples} | {figure(t.value_a)} | {figure(t.value_b)} | '
                f'{figure(t.difference)} | {figure(t.low)} – {figure(t.high)} | {t.test} | {t.p:.3g} | '
                f'{t.p_holm:.3g} | {discordant} | {odds} |'
            )
        result = {
            'resamples': opt['resamples'],
            'seed': opt['seed'],
            'adjustment': 'holm',
            'tests': [t.to_json() for t in tests],
        }
        if opt['json_out']:
            from parlai_empathy.evidence.artifacts import write_json

            write_json(opt['json_out'], result)
            print(f'tests written to {opt["json_out"]}')
        return result

    def _plain(self, path, fmt, scorer):
        from parlai_empathy.metrics.saved_outputs import read_outputs
        from parlai_empathy.metrics.suite import score_examples

        examples = read_outputs(path, fmt)
        if self.opt['emotion_classifier']:
            from parlai_empathy.leaderboard.published import detect_emotions

            generated = [e for e in examples if e.response is not None and e.emotion is not None]
            for example, emotion in zip(
                generated, detect_emotions(self.opt['emotion_classifier'], [e.response for e in generated])
            ):
                example.reply_emotion = emotion
        print(f'{len(examples)} examples from {path}')
        return score_examples(examples, scorer=scorer, progress=True, comparison=True)

    def _aligned(self, path, fmt, known, scorer):
        import os

        from parlai_empathy.leaderboard import published
        from parlai_empathy.metrics.alignment import ed_test_examples

        if fmt == 'auto':
            fmt = 'world_logs' if path.endswith(('.jsonl', '.json')) else 'tsv'
        outputs = published.read_any(path, fmt)
        if self.opt['item_statistics_only']:
            entry = self.opt['entry'] or (known.entry if known else None)
            if not (self.opt['artifacts'] and entry):
                raise SystemExit('--item-statistics-only adds to a row: give --artifacts DIR and --entry NAME')
            row_dir = os.path.join(self.opt['artifacts'], entry)
            added = published.add_item_statistics(row_dir, outputs, ed_test_examples(self.opt['ed_datapath']))
            print(f'{row_dir}: per-example statistics added to {added} examples')
            from parlai_empathy.evidence.artifacts import read_report
            from parlai_empathy.metrics.suite import SuiteReport

            report = read_report(row_dir)
            return SuiteReport(report['values'], report.get('exs') or {}, report.get('notes') or {})
        score = published.score_outputs(
            outputs, ed_test_examples(self.opt['ed_datapath']), scorer, self.opt['emotion_classifier']
        )
        print(f'{path} ({fmt}): {score.alignment.summary()}')
        if self.opt['artifacts']:
            entry = self.opt['entry'] or (known.entry if known else None)
            if not entry:
                raise SystemExit('--artifacts needs --entry NAME (the row) for a file given with -o')
            command = 'parlai empathy_score ' + shlex.join(
                sys.argv[2:] if sys.argv[1:2] == ['empathy_score'] else sys.argv[1:]
            )
            paths = published.write_row(os.path.join(self.opt['artifacts'], entry), entry, score, command, known)
            print(f'evidence written to {os.path.dirname(paths["report.json"])}')
        return score.report
