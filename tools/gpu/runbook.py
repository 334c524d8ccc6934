"""The GPU run of every table row. ``tools/gpu/run.sh PROFILE`` calls this with the
Python of the environment it made from the bundle's wheels; see tools/gpu/README.md.

1. unpacks the bundle (checksums verified): ED, GoEmotions, GloVe rows, MiniLM with float32
   weights restored; ``cpu-tiny`` and ``smoke`` cut the data sets short;
2. runs every row's ``gpu`` plan from ``projects/*/table.json`` (``parlai_empathy.evidence.reproduce``),
   all rows at once, each step its own ``parlai`` process with its own log, checkpoints and wall
   budget; a row starts once the rows it needs have done all but their evaluation. ``smoke`` and
   ``cpu-tiny`` add options to the plans' commands (a few updates; tiny models for ``cpu-tiny``);
3. evaluates through each plan's own ``parlai empathy_leaderboard --artifacts`` step into a copy
   of ``projects/``, then rebuilds the tables and the board from those artifacts alone
   (``--from-artifacts``);
4. packs each project's artifacts, tables, logs and learning curves, the board, a summary and its
   own log into at most 8 files in ``--out``, checking the limits of what comes back.

Exit status 1 when a row failed (the files are packed all the same).
"""

import argparse
import glob
import io
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tarfile
import threading
import time
from dataclasses import dataclass, field, replace
from typing import Dict, List, Optional

from gpu_plans import is_evidence_step
from halves import float32_model
from model_pieces import split as model_pieces

from parlai_empathy.data.ed_source import file_checksum as sha256
from parlai_empathy.evidence import reproduce
from parlai_empathy.files import offline_models

# ----- profiles ------------------------------------------------------------------------------------
TINY_TRANSFORMER = [
    '--embedding-size',
    '32',
    '--attention-size',
    '16',
    '--ffn-size',
    '32',
    '--n-heads',
    '2',
    '--dict-maxtokens',
    '1500',
]


@dataclass
class Profile:
    seconds: Optional[int]  # every row done this long after run.sh started, or stopped
    parallel: int  # rows at once (0: all)
    lines: Optional[Dict[str, int]] = None  # data cut short: lines kept per file
    minilm_layers: int = 6
    train: List[str] = field(default_factory=list)  # added to every train_model step
    models: Dict[str, List[str]] = field(default_factory=dict)  # added to train_model steps of an agent
    evaluate: List[str] = field(default_factory=list)  # added to every empathy_leaderboard step
    cpu_only: bool = False


PROFILES = {
    # on this CPU for the tests: a few hundred examples, tiny models, two updates, one MiniLM layer
    'cpu-tiny': Profile(
        seconds=None,
        parallel=2,
        cpu_only=True,
        minilm_layers=1,
        lines={'train.csv': 900, 'valid.csv': 300, 'test.csv': 300, 'train.tsv': 400, 'dev.tsv': 100, 'test.tsv': 100},
        train=[
            '--max-train-steps',
            '2',
            '-bs',
            '8',
            '-vstep',
            '2',
            '--validation-max-exs',
            '16',
            '--short-final-eval',
            'true',
            '--save-every-n-secs',
            '-1',
        ],
        models={
            'empathy/mime': TINY_TRANSFORMER + ['--latent-size', '16'],
            'empathy/multitask_transformer': TINY_TRANSFORMER,
            'empathy/ethreed': ['--hidden-size', '16', '--embedding-size', '16', '--dict-maxtokens', '1500'],
        },
        evaluate=['--bertscore-layer', '1', '--progress', 'false'],
    ),
    # on the GPU: every job for a few updates on a slice of the data, within 2 minutes
    'smoke': Profile(
        seconds=100,
        parallel=0,  # + gathering the tables and packing: under 2 minutes
        lines={
            'train.csv': 4000,
            'valid.csv': 1200,
            'test.csv': 1200,
            'train.tsv': 4000,
            'dev.tsv': 1000,
            'test.tsv': 1000,
        },
        train=['--max-train-steps', '10', '-vstep', '5', '--validation-max-exs', '256', '--short-final-eval', 'true'],
        evaluate=['--progress', 'false'],
    ),
    # on the GPU: the gpu plans exactly as table.json gives them, within 9 minutes
    'full': Profile(seconds=525, parallel=0),
}
OUT_FILES, OUT_FILE_BYTES, OUT_BYTES = 8, 16 * 2**20, 64 * 2**20
GATHER_SECONDS = 120  # the tables and the board from the artifacts (seconds on a GPU machine's cores)
LOG_HEAD, LOG_TAIL = 256 * 1024, 768 * 1024  # a packed log keeps its start and its end


def with_profile(argv: List[str], profile: Profile) -> List[str]:
    """A plan's command as ``profile`` runs it: its options added last (so they win)."""
    if argv[0] == 'train_model':
        agent = argv[argv.index('-m') + 1] if '-m' in argv else None
        return argv + profile.train + profile.models.get(agent, [])
    if argv[0] == 'empathy_leaderboard':
        return argv + profile.evaluate
    return list(argv)


# ----- the bundle ----------------------------------------------------------------------------------
def verify_bundle(bundle: str) -> Dict:
    with open(os.path.join(bundle, 'MANIFEST.json')) as f:
        manifest = json.load(f)
    bad = [rel for rel, info in manifest['files'].items() if sha256(os.path.join(bundle, rel)) != info['sha256']]
    if bad:
        raise RuntimeError(f'bundle files damaged in transfer (sha256 differs): {", ".join(bad)}')
    return manifest


def unpack(archive: str, into: str, sums: Optional[Dict[str, str]] = None) -> None:
    """``archive`` unpacked into ``into`` once (a marker holds the archive's sha256)."""
    marker = os.path.join(into, '.unpacked.' + os.path.basename(archive))
    digest = sha256(archive)
    if os.path.isfile(marker) and open(marker).read() == digest:
        return
    with tarfile.open(archive) as tar:
        tar.extractall(into, filter='data')
        names = tar.getnames()
    for name in names:
        if sums and name in sums and sha256(os.path.join(into, name)) != sums[name]:
            raise RuntimeError(f'{name} from {archive}: sha256 differs from the bundle manifest')
    with open(marker, 'w') as f:
        f.write(digest)


def cut_file(src: str, dst: str, lines: int) -> None:
    """The first ``lines`` lines; an ED csv is cut where a conversation ends."""
    with open(src, encoding='utf-8', errors='surrogateescape') as f:
        kept, last = [], None
        for line in f:
            conv = line.split(',', 1)[0]
            if len(kept) >= lines and (not src.endswith('.csv') or conv != last):
                break
            kept.append(line)
            last = conv
    with open(dst, 'w', encoding='utf-8', errors='surrogateescape') as f:
        f.writelines(kept)


def data_variant(full: str, out: str, lines: Optional[Dict[str, int]]) -> str:
    """``full`` as it is, or a copy with each file cut to ``lines[name]`` lines."""
    if not lines:
        return full
    os.makedirs(out, exist_ok=True)
    for name in os.listdir(full):
        src = os.path.join(full, name)
        if os.path.isfile(src) and not name.startswith('.'):
            if name in lines:
                cut_file(src, os.path.join(out, name), lines[name])
            else:
                shutil.copy(src, os.path.join(out, name))
    return out


def prepare_data(bundle: str, scratch: str, name: str, profile: Profile, manifest: Dict) -> Dict[str, str]:
    """The environment variables that point the package at the bundle's data and models."""
    full = os.path.join(scratch, 'data')
    for archive in ('ed', 'goemotions', 'glove'):
        unpack(os.path.join(bundle, 'data', f'{archive}.tar.xz'), full, manifest['data'])
    cut = os.path.join(scratch, name, 'data')
    return {
        'PARLAI_EMPATHY_ED_DIR': data_variant(
            os.path.join(full, 'empatheticdialogues'), os.path.join(cut, 'empatheticdialogues'), profile.lines
        ),
        'PARLAI_EMPATHY_GOEMOTIONS_DIR': data_variant(
            os.path.join(full, 'goemotions'), os.path.join(cut, 'goemotions'), profile.lines
        ),
        'PARLAI_EMPATHY_GLOVE_DIR': os.path.join(full, 'glove'),
        'PARLAI_EMPATHY_MINILM_DIR': float32_model(
            os.path.join(bundle, 'minilm'),
            os.path.join(scratch, f'minilm-{profile.minilm_layers}'),
            profile.minilm_layers,
        ),
    }


def prepare_mpnet(pieces: str, scratch: str) -> Dict[str, str]:
    """all-mpnet-base-v2 joined from the float16 pieces earlier commands left in ``pieces``
    (``mpnet_pieces.py``, tools/gpu/README.md) into a float32 folder, once, checked against the
    pieces' sha256; the package finds it through ``$PARLAI_EMPATHY_MPNET_DIR``."""
    import mpnet_pieces

    if not os.path.isfile(os.path.join(pieces, mpnet_pieces.MANIFEST)):
        raise FileNotFoundError(
            f'--mpnet-pieces {pieces} holds no {mpnet_pieces.MANIFEST}: send every piece first '
            '(tools/gpu/README.md, all-mpnet-base-v2)'
        )
    os.makedirs(scratch, exist_ok=True)
    return {offline_models.MPNET_DIR_ENV: mpnet_pieces.join(pieces, os.path.join(scratch, 'mpnet-float32'))}


# ----- rows --------------------------------------------------------------------------------------
@dataclass
class Row:
    key: str
    plan: reproduce.RowPlan
    needs: List[str]
    status: str = 'waiting'
    steps: List[Dict] = field(default_factory=list)
    started: Optional[float] = None
    ended: Optional[float] = None
    gate: threading.Event = field(default_factory=threading.Event)  # set: rows that need it may start


def mpnet_installed() -> bool:
    if os.environ.get(offline_models.MPNET_DIR_ENV):
        return True  # joined from the pieces that travelled to this machine (prepare_mpnet)
    try:
        offline_models.mpnet_pieces()
    except offline_models.OfflineModelMissing:
        return False
    return True


def select_rows(
    projects: str,
    runs: str,
    wanted: List[str],
    name: str,
    profile: Optional[Profile] = None,
    row_train: Optional[Dict[str, List[str]]] = None,
) -> Dict[str, Row]:
    """The rows asked for (default: every row with a plan) and the rows they need: their gpu plans
    with the options of profile ``name`` (recorded in each row's evidence as ``gpu+<name>``).

    all-mpnet-base-v2 (438 MB) does not travel in the bundle (see mpnet_pieces.py): where it is not
    installed, the default selection leaves its rows out rather than failing them; a row named in
    ``wanted`` still runs."""
    profile = profile or PROFILES[name]
    keys = list(wanted) or [
        f'{p}/{e}'
        for p in sorted(os.listdir(projects))
        if os.path.isfile(os.path.join(projects, p, 'table.json'))
        for e in reproduce.all_rows(projects, p)
        if 'gpu' in reproduce.row_profiles(projects, p, e)
    ]
    leave_out_mpnet = not wanted and not mpnet_installed()
    rows: Dict[str, Row] = {}
    while keys:
        key = keys.pop(0)
        if key in rows:
            continue
        project, _, entry = key.rpartition('/')
        plan = reproduce.row_plan(projects, project, entry, runs, 'gpu')
        if leave_out_mpnet and any(offline_models.OFFLINE_MPNET in step.argv for step in plan.steps):
            print(f'[runbook] {key} left out: all-mpnet-base-v2 is not installed here', flush=True)
            continue
        extra = (row_train or {}).get(key, [])  # --train-rows: --train-args for these rows only
        if profile.train or profile.evaluate or extra:
            plan.profile = f'gpu+{name}'
        for step in plan.steps:
            step.argv = with_profile(step.argv, profile) + (extra if step.argv[0] == 'train_model' else [])
        needs = [n if '/' in n else f'{project}/{n}' for n in plan.needs]
        rows[key] = Row(key, plan, needs)
        keys += needs
    return rows


class Runner:
    def __init__(self, rows: Dict[str, Row], deadline: Optional[float], parallel: int, logs: str, clock0: float):
        self.rows, self.deadline, self.logs, self.clock0 = rows, deadline, logs, clock0
        self.slots = threading.BoundedSemaphore(parallel or len(rows))
        self.lock = threading.Lock()

    def say(self, text: str) -> None:
        with self.lock:
            print(f'[{time.time() - self.clock0:6.1f} s] {text}', flush=True)

    def run_all(self) -> None:
        threads = [threading.Thread(target=self.run_row, args=(row,), daemon=True) for row in self.rows.values()]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    def run_row(self, row: Row) -> None:
        try:
            for need in row.needs:
                self.rows[need].gate.wait()
            blocked = [n for n in row.needs if self.rows[n].status in ('failed', 'blocked', 'timed out', 'not started')]
            if blocked:
                row.status = 'blocked'
                self.say(f'{row.key}: not run, it needs {", ".join(blocked)}')
                return
            with self.slots:
                self.run_steps(row)
        finally:
            row.gate.set()

    def run_steps(self, row: Row) -> None:
        row.started, row.status = time.time(), 'running'
        self.say(f'{row.key}: started')
        log_dir = os.path.join(self.logs, row.key)
        for i, step in enumerate(row.plan.steps):
            if all(is_evidence_step(s.argv) for s in row.plan.steps[i:]):
                row.gate.set()  # what other rows use is made: only this row's evaluation is left
            left = None if self.deadline is None else self.deadline - time.time()
            if left is not None and left < 1:
                row.status = 'not started' if i == 0 else 'timed out'
                break
            t0 = time.time()
            try:
                if not step.done():
                    reproduce.run_step(step, log_dir, timeout=left)
                row.steps.append({'name': step.name, 'seconds': round(time.time() - t0, 1), 'command': step.shell()})
            except RuntimeError as err:
                row.steps.append(
                    {
                        'name': step.name,
                        'seconds': round(time.time() - t0, 1),
                        'command': step.shell(),
                        'error': str(err),
                    }
                )
                row.status = 'timed out' if 'was stopped after' in str(err) else 'failed'
                self.say(f'{row.key}: {err}')
                break
            self.say(f'{row.key}: {step.name} done in {time.time() - t0:.0f} s')
        else:
            row.status = 'ok'
            reproduce.record_plan(row.plan)
        row.ended = time.time()
        self.say(f'{row.key}: {row.status} after {row.ended - row.started:.0f} s')


# ----- GPU load while the rows run ------------------------------------------------------------------
class GpuSampler(threading.Thread):
    """``nvidia-smi`` every few seconds (utilization, memory), when there is one."""

    def __init__(self, clock0: float, every: float = 5.0):
        super().__init__(daemon=True)
        self.clock0, self.every, self.samples, self.stop = clock0, every, [], threading.Event()
        self.available = shutil.which('nvidia-smi') is not None

    def query(self, fields: str) -> Optional[str]:
        try:
            return subprocess.run(
                ['nvidia-smi', f'--query-gpu={fields}', '--format=csv,noheader,nounits'],
                capture_output=True,
                text=True,
                timeout=10,
            ).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return None

    def run(self):
        while self.available and not self.stop.wait(self.every):
            line = self.query('utilization.gpu,memory.used')
            if line:
                self.samples.append([round(time.time() - self.clock0, 1)] + [float(v) for v in line.split(',')[:2]])


# ----- packing --------------------------------------------------------------------------------------
def add_log(tar: tarfile.TarFile, path: str, arcname: str) -> None:
    """A log, its middle left out when it is long (the start and the end tell what happened)."""
    size = os.path.getsize(path)
    if size <= LOG_HEAD + LOG_TAIL:
        tar.add(path, arcname)
        return
    with open(path, 'rb') as f:
        head = f.read(LOG_HEAD)
        f.seek(size - LOG_TAIL)
        tail = f.read()
    data = head + f'\n[... {size - LOG_HEAD - LOG_TAIL} bytes left out ...]\n'.encode() + tail
    info = tarfile.TarInfo(arcname)
    info.size, info.mtime = len(data), int(time.time())
    tar.addfile(info, io.BytesIO(data))


def pack(out: str, projects: str, runs: str, logs: str, board: str, rows: Dict[str, Row]) -> List[str]:
    os.makedirs(out, exist_ok=True)
    written = []
    for project in sorted({key.rpartition('/')[0] for key in rows}):
        path = os.path.join(out, f'{project}.tar.gz')
        with tarfile.open(path, 'w:gz') as tar:
            tar.add(os.path.join(projects, project), f'projects/{project}')
            for key in sorted(k for k in rows if k.startswith(project + '/')):
                for log in sorted(glob.glob(os.path.join(logs, key, '*.log'))):
                    add_log(tar, log, f'logs/{key}/{os.path.basename(log)}')
                stats = rows[key].plan.model + '.trainstats'
                if os.path.isfile(stats):
                    tar.add(stats, f'trainstats/{key}.trainstats')
        written.append(path)
    if os.path.isdir(board):
        path = os.path.join(out, 'leaderboard.tar.gz')
        with tarfile.open(path, 'w:gz') as tar:
            tar.add(board, 'leaderboard')
        written.append(path)
    return written


def check_out(out: str) -> List[str]:
    """What breaks the limits of what comes back from the GPU machine."""
    problems, files = [], []
    for root, _dirs, names in os.walk(out):
        depth = len(os.path.relpath(root, out).split(os.sep)) - (root == out)
        if depth > 2 and names:
            problems.append(f'{root}: more than two folders down')
        files += [os.path.join(root, n) for n in names]
    if len(files) > OUT_FILES:
        problems.append(f'{len(files)} files, more than {OUT_FILES}')
    for path in files:
        if not re.fullmatch(r'[A-Za-z0-9._-]+', os.path.basename(path)):
            problems.append(f'{path}: a name with other characters than letters, digits, ".", "_" and "-"')
        if os.path.getsize(path) > OUT_FILE_BYTES:
            problems.append(f'{path}: {os.path.getsize(path) / 2**20:.1f} MiB, more than 16 MiB')
    total = sum(os.path.getsize(p) for p in files)
    if total > OUT_BYTES:
        problems.append(f'{total / 2**20:.1f} MiB together, more than 64 MiB')
    return problems


# ----- main ----------------------------------------------------------------------------------------
class Tee:
    def __init__(self, *streams):
        self.streams = streams

    def write(self, text):
        for s in self.streams:
            s.write(text)
            s.flush()

    def flush(self):
        for s in self.streams:
            s.flush()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description='The GPU run of every table row (tools/gpu/README.md)')
    parser.add_argument('profile', choices=sorted(PROFILES))
    parser.add_argument('--bundle', required=True)
    parser.add_argument('--scratch', required=True)
    parser.add_argument('--out', required=True)
    parser.add_argument('--repo', required=True)
    parser.add_argument('--started', type=float, default=None, help='when run.sh started (epoch seconds)')
    parser.add_argument('--rows', default='', help='comma-separated project/row (default: every row); needs are added')
    parser.add_argument(
        '--seconds',
        type=int,
        default=None,
        help="every row done this long after run.sh started (default: the profile's)",
    )
    parser.add_argument(
        '--train-args', default='', help='options added last to every train_model step, e.g. "--max-train-time 120"'
    )
    parser.add_argument(
        '--train-rows',
        default='',
        help='comma-separated project/row: --train-args go to these rows only (default: every row)',
    )
    parser.add_argument(
        '--mpnet-pieces',
        default='',
        help='a folder holding every float16 piece of all-mpnet-base-v2 (mpnet_pieces.py): joined and used',
    )
    parser.add_argument(
        '--eval-workers',
        type=int,
        default=1,
        help='each evidence step shards its evaluation over this many processes '
        '(empathy_leaderboard --eval-workers; beam search is bound by one CPU thread each)',
    )
    parser.add_argument(
        '--weights',
        default='',
        help='comma-separated project/row whose trained model comes back in float16 pieces '
        '(model_pieces.py; each must be one of the rows run)',
    )
    args = parser.parse_args(argv)
    profile = PROFILES[args.profile]
    if args.eval_workers > 1:
        profile = replace(profile, evaluate=profile.evaluate + ['--eval-workers', str(args.eval_workers)])
    train_rows = [r for r in args.train_rows.split(',') if r]
    # the caller's own limits override the profile's (tools/gpu/README.md)
    if args.seconds is not None or args.train_args:
        profile = replace(
            profile,
            seconds=profile.seconds if args.seconds is None else args.seconds,
            train=profile.train + ([] if train_rows else shlex.split(args.train_args)),
        )
    clock0 = args.started or time.time()
    os.makedirs(args.out, exist_ok=True)
    driver_log = open(os.path.join(args.out, 'driver.log'), 'w')
    sys.stdout = Tee(sys.__stdout__, driver_log)

    def say(text):
        print(f'[{time.time() - clock0:6.1f} s] {text}', flush=True)

    say(f'profile {args.profile}; bundle {args.bundle}; scratch {args.scratch}')
    manifest = verify_bundle(args.bundle)
    work = os.path.join(args.scratch, args.profile)
    for sub in ('runs', 'projects', 'board', 'logs', 'parlai_data'):
        shutil.rmtree(os.path.join(work, sub), ignore_errors=True)
    env = prepare_data(args.bundle, args.scratch, args.profile, profile, manifest)
    if args.mpnet_pieces:
        env.update(prepare_mpnet(args.mpnet_pieces, args.scratch))
    env.update(
        PARLAI_DATAPATH=os.path.join(work, 'parlai_data'),
        PARLAI_EMPATHY_REPO=args.repo,
        HF_HUB_OFFLINE='1',
        TRANSFORMERS_OFFLINE='1',
        TOKENIZERS_PARALLELISM='false',
        OMP_NUM_THREADS='1',
        MKL_NUM_THREADS='1',
        PYTHONUNBUFFERED='1',
    )
    if profile.cpu_only:
        env['CUDA_VISIBLE_DEVICES'] = ''
    os.environ.update(env)
    say(
        'data and models ready: '
        + ', '.join(f'{k}={v}' for k, v in sorted(env.items()) if k.startswith('PARLAI_EMPATHY'))
    )

    projects, runs = os.path.join(work, 'projects'), os.path.join(work, 'runs')
    shutil.copytree(os.path.join(args.repo, 'projects'), projects)
    os.chdir(work)  # so that every parlai process imports the installed package, not the checkout's
    rows = select_rows(
        projects,
        runs,
        [r for r in args.rows.split(',') if r],
        args.profile,
        profile,
        {key: shlex.split(args.train_args) for key in train_rows},
    )
    bring = [r for r in args.weights.split(',') if r]
    for flag, named in (('--train-rows', train_rows), ('--weights', bring)):
        if set(named) - set(rows):
            raise SystemExit(f'{flag} names rows this run does not run: {", ".join(sorted(set(named) - set(rows)))}')
    deadline = None if profile.seconds is None else clock0 + profile.seconds
    sampler = GpuSampler(clock0)
    device = sampler.query('name,memory.total,driver_version') if sampler.available else None
    say(
        f'{len(rows)} rows; device: {device or "no GPU seen by nvidia-smi"}; '
        f'deadline: {"none" if deadline is None else f"{profile.seconds} s"}'
    )
    sampler.start()
    runner = Runner(rows, deadline, profile.parallel, os.path.join(work, 'logs'), clock0)
    runner.run_all()
    sampler.stop.set()

    board = os.path.join(work, 'board')
    try:
        gathered = subprocess.run(
            [sys.executable, '-m', 'parlai', 'empathy_leaderboard', '--from-artifacts', projects, '--outdir', board],
            capture_output=True,
            text=True,
            timeout=GATHER_SECONDS,
        )
    except subprocess.TimeoutExpired as err:
        gathered = subprocess.CompletedProcess(err.cmd, 124, '', f'stopped after {GATHER_SECONDS} s')
    say(
        f'tables and board from the artifacts: exit {gathered.returncode}\n'
        f'{gathered.stdout[-3000:]}{gathered.stderr[-3000:]}'
    )
    summary = {
        'profile': args.profile,
        'device': device,
        'bundle': {k: manifest[k] for k in ('code', 'minilm', 'glove_rows')},
        'environment': {k: v for k, v in env.items() if not k.startswith('PARLAI_EMPATHY_')},
        'seconds_to_rows_done': round(time.time() - clock0, 1),
        'rows': {
            key: {
                'status': row.status,
                'needs': row.needs,
                'start': row.started and round(row.started - clock0, 1),
                'end': row.ended and round(row.ended - clock0, 1),
                'steps': row.steps,
            }
            for key, row in rows.items()
        },
        'tables_from_artifacts_exit': gathered.returncode,
        'gpu_samples': {'columns': ['seconds', 'utilization %', 'memory MiB'], 'rows': sampler.samples},
    }
    written = pack(args.out, projects, runs, os.path.join(work, 'logs'), board, rows)
    summary['weights'] = {}
    for key in bring:  # the trained model itself, float16, in pieces (tools/gpu/model_pieces.py)
        if not os.path.isfile(rows[key].plan.model):
            say(f'{key}: no model file to bring back')
            continue
        info = model_pieces(rows[key].plan.model, args.out, key.replace('/', '.'))
        summary['weights'][key] = info
        written += [os.path.join(args.out, p) for p in info['pieces']]
        say(f'{key}: model in {len(info["pieces"])} float16 pieces, largest rounding {info["max_abs_rounding"]:.1e}')
    with open(os.path.join(args.out, 'summary.json'), 'w') as f:
        json.dump(summary, f, indent=1)
    counts = {}
    for row in rows.values():
        counts[row.status] = counts.get(row.status, 0) + 1
    say('rows: ' + ', '.join(f'{n} {s}' for s, n in sorted(counts.items())))
    for path in written + [os.path.join(args.out, 'summary.json')]:
        say(f'{os.path.basename(path)}: {os.path.getsize(path) / 2**20:.2f} MiB')
    problems = check_out(args.out)
    say(
        f'done in {time.time() - clock0:.0f} s'
        + ('' if not problems else '; OUT BREAKS THE LIMITS: ' + '; '.join(problems))
    )
    driver_log.close()
    sys.stdout = sys.__stdout__
    failed = any(row.status in ('failed', 'blocked') for row in rows.values())
    return 1 if failed or problems or gathered.returncode else 0


if __name__ == '__main__':
    sys.exit(main())
