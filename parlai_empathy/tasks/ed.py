"""EmpatheticDialogues teachers: ``empathy_ed`` (faithful) and ``empathy_ed_clean`` (cleaned).

``empathy_ed`` yields exactly the examples of ParlAI's own ``empathetic_dialogues`` teacher
(64,636 / 5,738 / 5,259 on the official files) but fails on a malformed file with an error that
names file, line and field. ``empathy_ed_clean`` recovers such rows (Metz & You's cleaned ED) and
writes a cleaning report; ``parlai empathy_clean_report`` prints it.

Full-path form, for when ParlAI's namespace modules are not installed:
``-t parlai_empathy.tasks.ed:CleanTeacher`` / ``-t parlai_empathy.tasks.ed:FaithfulTeacher``.
"""

import os
from typing import Optional

import parlai.utils.logging as logging
from parlai.core.opt import Opt
from parlai.core.params import ParlaiParser
from parlai.core.teachers import DialogTeacher, register_teacher

from parlai_empathy.data import bulk, ed_episodes, ed_raw, ed_source
from parlai_empathy.data.file_errors import exit_on_data_errors, guard_teacher, no_examples
from parlai_empathy.files.cache_lock import build_lock
from parlai_empathy.metrics import retrieval

MAX_WARNED_ROWS = 10
CANDIDATE_MODES = ('inline', 'none', 'rashkin100', 'rashkin100_shuffled', 'random100')


class EDTeacherBase(DialogTeacher):
    """Shared options and episode building; subclasses choose the reader."""

    cleaned = False
    # options that change which examples a split yields: they key the streaming length cache
    length_key_options = ('train_experiencer_only', 'ed_history_length', 'ed_candidates', 'ed_candidates_seed')
    # response teachers score every reply with the metric suite; classification teachers do not
    scores_responses = True

    @classmethod
    def add_cmdline_args(cls, parser: ParlaiParser, partial_opt: Optional[Opt] = None) -> ParlaiParser:
        super().add_cmdline_args(parser, partial_opt)
        group = parser.add_argument_group('EmpatheticDialogues (parlai-empathy) arguments')
        group.add_argument(
            '--ed-datapath',
            type=str,
            default=None,
            help=f'Folder with train.csv/valid.csv/test.csv; "sample" = the small real sample embedded '
            f'in parlai-empathy. Default: ${ed_source.ED_DIR_ENV}, else the official release '
            f'downloaded into --datapath.',
        )
        group.add_argument(
            '--train-experiencer-only',
            type='bool',
            default=False,
            help='In train, only use the side where the Listener responds (as in ParlAI). Valid and '
            'test always use only that side.',
        )
        group.add_argument(
            '--ed-history-length',
            type=int,
            default=0,
            help='0: ParlAI episodes (text is the previous utterance; the agent keeps the history). '
            'N>0: every example is its own episode whose text is the last N utterances joined by '
            'newlines (the ED paper uses 4).',
        )
        group.add_argument(
            '--ed-candidates',
            type=str,
            default='inline',
            choices=CANDIDATE_MODES,
            help="label_candidates to emit. inline: the raw files' 9th field when present (ParlAI's "
            "behaviour); rashkin100: Rashkin et al.'s P@1,100 protocol - consecutive blocks of 100 "
            'examples share their gold responses as candidates and the last partial block is dropped, '
            'so that --eval-candidates inline makes hits@1 equal P@1,100; rashkin100_shuffled: the '
            'same on blocks of a seeded random permutation (the paper\'s "100 randomly selected test '
            'examples", the shuffled figure its code prints; every example its own episode); '
            "random100: the gold plus 99 seeded random responses of the split (not Rashkin's "
            'protocol); none.',
        )
        group.add_argument(
            '--ed-candidates-seed', type=int, default=0, help='seed for rashkin100_shuffled and random100'
        )
        return parser

    def __init__(self, opt, shared=None):
        # a missing or unreadable file ends the command with its one-line message (file_errors)
        with exit_on_data_errors():
            self._init(Opt(opt), shared)

    def _init(self, opt, shared):
        self.split = opt['datatype'].split(':')[0]
        if shared is None:
            folder = ed_source.resolve_ed_dir(opt.get('ed_datapath'), opt.get('datapath'))
            opt['datafile'] = os.path.join(folder, self.split + '.csv')
            if 'stream' in opt['datatype']:
                opt['length_datafile'] = self.length_cache_path(opt)
        else:
            opt['datafile'] = shared['opt']['datafile']
            opt['length_datafile'] = shared['opt'].get('length_datafile')
        self.id = self.task_name
        # the column a P@1,100 hit is recorded under: each block protocol has its own
        shuffled = opt.get('ed_candidates') == 'rashkin100_shuffled'
        self.p100_metric = retrieval.SHUFFLED_METRIC if shuffled else retrieval.METRIC
        guard_teacher(self)
        super().__init__(opt, shared)
        if self.stream and self.data.length_datafile:
            self.data.load_length = locked_length_loader(self.data.load_length, self.data.length_datafile)

    def read_conversations(self, path):
        raise NotImplementedError

    def custom_evaluation(self, teacher_action, labels, model_response) -> None:
        """Score every model's replies with the suite, stock ParlAI agents included.

        ParlAI calls this for each reply during validation and ``eval_model``. Agents of ours that
        already recorded the suite's figures for a reply (they appear in its ``metrics``) are not
        counted twice.
        """
        from parlai_empathy.metrics import parlai_metrics

        if not self.scores_responses or not labels or model_response is None:
            return
        already = model_response.get('metrics') or {}
        gold = labels[0]
        response = model_response.get('text')
        if response is not None and 'avg_bleu' not in already:
            parlai_metrics.record_generation_metrics(self.metrics, gold, response)
        ranked = model_response.get('text_candidates')
        candidates = teacher_action.get('label_candidates')
        name = self.p100_metric
        if self.opt.get('ed_candidates') in ('rashkin100', 'rashkin100_shuffled'):
            # P@1,100 covers every example of every block, or the evaluation stops
            where = (
                f'{self.id} {self.split} example conv {teacher_action.get("conv_id")} turn {teacher_action.get("turn")}'
            )
            if not candidates or len(candidates) != retrieval.NUM_CANDIDATES:
                raise ValueError(
                    f'P@1,100: {where} has {len(candidates or [])} candidates, not {retrieval.NUM_CANDIDATES}'
                )
            if not ranked:
                raise ValueError(
                    f'P@1,100: the model returned no ranked candidates for {where}; evaluate a '
                    'ranker with --eval-candidates inline (and --ignore-bad-candidates false)'
                )
        if ranked and candidates and len(candidates) == retrieval.NUM_CANDIDATES and name not in already:
            parlai_metrics.record_retrieval_metrics(self.metrics, ranked, gold, len(candidates), name)

    def length_cache_path(self, opt):
        """Streaming caches example counts; ParlAI would write them beside the (maybe read-only)
        source file, so they go into the datapath, keyed by file content and the options that
        change the count."""
        import hashlib

        settings = repr([(name, opt.get(name)) for name in self.length_key_options])
        key = hashlib.sha256(settings.encode()).hexdigest()[:12]
        checksum = ed_source.file_checksum(opt['datafile'])[:12]
        folder = os.path.join(opt['datapath'], self.task_name, checksum)
        os.makedirs(folder, exist_ok=True)
        return os.path.join(folder, f'{self.split}-{key}.lengths')

    def check_inline_candidates(self, path, episodes):
        """ParlAI fails with a bare RuntimeError when the gold is not among inline candidates."""
        for episode in episodes:
            for example in episode:
                if example.label_candidates is not None and example.label not in example.label_candidates:
                    raise ed_raw.EDFormatError(
                        path,
                        example.line_no,
                        'candidates',
                        'the gold response is not among the inline (9th-field) candidates, so ParlAI '
                        'cannot use them; use -t empathy_ed_clean (which appends the gold) or '
                        '--ed-candidates rashkin100/none',
                    )

    def setup_data(self, path):
        # ParlAI consumes this generator in one go while building its tables: the whole load,
        # ParlAI's message objects included, runs with the cyclic GC paused (see data.bulk)
        with bulk.paused_gc():
            yield from self._examples(path)

    def _examples(self, path):
        logging.info(f'{self.task_name}: loading {path}')
        conversations = self.read_conversations(path)
        both_sides = self.split == 'train' and not self.opt.get('train_experiencer_only', False)
        episodes = ed_episodes.build_episodes(conversations, both_sides, self.opt.get('ed_history_length', 0))
        mode = self.opt.get('ed_candidates', 'inline')
        if mode == 'none':
            for episode in episodes:
                for example in episode:
                    example.label_candidates = None
        elif mode in ('rashkin100', 'rashkin100_shuffled'):
            total = sum(len(e) for e in episodes)
            seed = self.opt.get('ed_candidates_seed', 0) if mode == 'rashkin100_shuffled' else None
            episodes = ed_episodes.attach_rashkin_candidates(
                episodes, shuffle_seed=seed, whole_context_text=self.opt.get('ed_history_length', 0) <= 0
            )
            kept = sum(len(e) for e in episodes)
            logging.info(
                f'{self.task_name}: P@1,100 blocks keep {kept} of {total} examples (last partial block dropped)'
            )
        elif mode == 'random100':
            episodes = ed_episodes.attach_random_candidates(episodes, seed=self.opt.get('ed_candidates_seed', 0))
        else:
            self.check_inline_candidates(path, episodes)
        if not any(episodes):
            raise no_examples(
                path,
                f'{len(conversations)} conversations, none with a reply to learn from '
                f'(each needs at least 2 utterances)',
            )
        for episode in episodes:
            for i, example in enumerate(episode):
                yield example.to_message(), i == 0


@register_teacher('empathy_ed')
class FaithfulTeacher(EDTeacherBase):
    """ParlAI's empathetic_dialogues examples, with clear errors instead of asserts."""

    task_name = 'empathy_ed'

    def read_conversations(self, path):
        return ed_raw.read_faithful(path)


@register_teacher('empathy_ed_clean')
class CleanTeacher(EDTeacherBase):
    """Metz & You's cleaned ED: malformed rows recovered, every fix reported."""

    task_name = 'empathy_ed_clean'
    cleaned = True

    def read_conversations(self, path):
        conversations, report = ed_raw.read_clean(path)
        report_dir = clean_report_dir(self.opt['datapath'], path)
        json_path = ed_raw.write_report(report, report_dir, self.split)
        fixed = sum(v['count'] for v in report.fixes.values())
        logging.info(
            f'{self.task_name}: {report.rows_kept} rows kept of {report.rows_read}, {fixed} fixes, '
            f'{len(report.unrecoverable)} unrecoverable; report: {json_path}'
        )
        # a file with thousands of broken rows must not bury the summary: the report lists them all
        for bad in report.unrecoverable[:MAX_WARNED_ROWS]:
            logging.warning(f'{path}, line {bad["line"]}: not recoverable: {bad["reason"]}')
        if len(report.unrecoverable) > MAX_WARNED_ROWS:
            logging.warning(
                f'{path}: {len(report.unrecoverable) - MAX_WARNED_ROWS} more rows not recoverable; '
                f'all are listed in {json_path}'
            )
        return conversations


def locked_length_loader(load_length, length_file: str):
    """ParlAI's streaming data counts a split's examples once and writes the counts to
    ``length_file`` in place, unlocked: a rank that starts at the same moment can read the file
    half-written and fail. Under a lock one rank counts and the others read its file; a file that
    does not hold two counts (left by a killed process) is counted again."""

    def load():
        with build_lock(length_file, f'counting the examples into {length_file}'):
            if os.path.exists(length_file) and not _holds_counts(length_file):
                logging.warning(f'{length_file}: not two example counts (an interrupted write?): counting again')
                os.remove(length_file)
            return load_length()

    return load


def _holds_counts(path: str) -> bool:
    try:
        with open(path, encoding='utf-8') as f:
            return len([int(line) for line in f.read().split()]) == 2
    except (OSError, ValueError):
        return False


def clean_report_dir(parlai_datapath: str, source_file: str) -> str:
    """Reports live beside ParlAI's built data, keyed by the source file's content."""
    tag = ed_source.file_checksum(source_file)[:12]
    return os.path.join(parlai_datapath, 'empathy_ed_clean', tag)


class DefaultTeacher(CleanTeacher):
    pass
