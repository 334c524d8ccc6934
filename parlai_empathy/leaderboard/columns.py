"""The board's columns: every figure in the CSV's order, and the headline figure of each model
family with the scale, unit and header the markdown table and the figure show it with."""

from dataclasses import dataclass
from typing import List

from parlai_empathy.leaderboard.human import COLUMNS as HUMAN_COLUMNS
from parlai_empathy.leaderboard.records import EntryResult
from parlai_empathy.metrics.retrieval import METRIC as P100
from parlai_empathy.metrics.retrieval import SHUFFLED_METRIC as P100_SHUFFLED
from parlai_empathy.metrics.suite import COLUMNS

# the response models' figures, in the board's column order (the suite's headline columns first)
SHOWN = [
    P100,
    P100_SHUFFLED,
    'avg_bleu',
    'multi_bleu',
    'dist-1',
    'dist-2',
    'bertscore_f',
    'ppl',
    'ppl_ex',
    'ppl_ex_gold',
    'ppl_word',
    'emo_acc',
    'emo_acc@2',
    'emo_acc@5',
]
CLASSIFIER_COLUMNS = ['accuracy', 'macro_f1', 'micro_f1', 'macro_f1_tuned', 'micro_f1_tuned', 'speaker_agreement']


def board_columns(results: List[EntryResult]) -> List[str]:
    """Every figure any row has, in the CSV's order (the suite's headline columns first)."""
    columns = [c for c in SHOWN + CLASSIFIER_COLUMNS + HUMAN_COLUMNS if any(c in r.values for r in results)]
    return columns + [c for c in COLUMNS if c not in columns and any(c in r.values for r in results)]


@dataclass(frozen=True)
class Headline:
    """A headline metric: its report key, what it is, the scale and unit the board shows it on
    (``scale`` multiplies the report's figure: 100 turns the suite's fractions into percentages)
    and its header in the markdown table."""

    key: str
    title: str
    unit: str
    scale: float
    column: str
    note: str = ''  # said under the markdown table


# the headline figure of each family, on the scale a paper prints it, in the markdown table's order
HEADLINE = [
    Headline(P100, 'P@1,100, consecutive blocks', '%', 100, 'P@1,100 consecutive %'),
    Headline(P100_SHUFFLED, 'P@1,100, shuffled blocks', '%', 100, 'P@1,100 shuffled %'),
    Headline('ppl_ex', 'PPL, per-response mean', 'perplexity', 1, 'PPL'),
    Headline(
        'ppl_ex_gold',
        'PPL, per-response mean, gold polarity',
        'perplexity',
        1,
        'PPL gold polarity',
        "the gold user polarity steers MIME's mimicry, as in the reference code's PPL",
    ),
    Headline(
        'ppl_word',
        'PPL per word of the gold reply',
        'perplexity',
        1,
        'per-word PPL',
        "the model's own NLL of the gold reply, end token excluded, per regex word "
        '(docs/metric_definitions.md): comparable across vocabularies',
    ),
    Headline('emo_acc', 'emotion accuracy', '%', 100, 'emotion acc. %'),
    Headline('avg_bleu', 'AVG BLEU, sacrebleu', 'BLEU 0-100', 1, 'AVG BLEU'),
    Headline('multi_bleu', 'BLEU-4, multi-bleu lowercased', 'BLEU 0-100', 1, 'multi-BLEU'),
    Headline('dist-1', 'Dist-1', '%', 100, 'Dist-1 %'),
    Headline('dist-2', 'Dist-2', '%', 100, 'Dist-2 %'),
    Headline('bertscore_f', 'BERTScore F1', '0-1', 1, 'BERTScore F1'),
    Headline('accuracy', 'classifier accuracy', '%', 100, 'classifier acc. %'),
    Headline('macro_f1', 'classifier macro-F1', '0-1', 1, 'classifier macro-F1'),
]
