"""The file attacks of docs/security.md, each mounted for real with fresh inputs, and what each cost.

    python bench/security_attacks.py [--out bench/results/security_attacks.json]

Every attack runs as its own process (the stock ``parlai`` command where a user would type one,
else ``python -c`` on the reader), in a scratch folder, with a 120 s guard against hangs. Each row
records the exit status, the last line the process wrote to stderr, whether a traceback appeared,
the wall seconds, the child's peak resident memory (``wait4``'s ru_maxrss, which includes the
pages of this small process it was started from: ``bench_process_peak_rss_mb`` in the meta) and
the bytes left on disk in the scratch folder afterwards. The first row, ``parlai empathy_score --help``, is what
starting the command costs on its own, for comparison. The machine and its load average are
written with the rows: timings taken while other jobs share the cores are contended.
"""

import argparse
import io
import json
import os
import platform
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time

VENV_BIN = os.path.dirname(sys.executable)
PARLAI = os.path.join(VENV_BIN, 'parlai')
GUARD = 120


def measured(argv, cwd, env=None, stdin=b''):
    start = time.monotonic()
    proc = subprocess.Popen(
        argv,
        cwd=cwd,
        env=dict(os.environ, HF_HUB_OFFLINE='1', **(env or {})),
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    proc.stdin.write(stdin)
    proc.stdin.close()
    deadline = start + GUARD
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        if time.monotonic() > deadline:
            proc.kill()
            os.wait4(proc.pid, 0)
            return {'outcome': 'HUNG (killed after the guard)', 'seconds': GUARD}
        time.sleep(0.02)
    seconds = time.monotonic() - start
    err = proc.stderr.read().decode('utf-8', 'replace')
    lines = [
        line for line in err.strip().splitlines() if line.strip() and ' INFO ' not in line and ' WARNING ' not in line
    ]
    return {
        'rc': os.waitstatus_to_exitcode(status),
        'seconds': round(seconds, 2),
        'peak_rss_mb': round(usage.ru_maxrss / 1024, 1),
        'traceback': 'Traceback' in err,
        'last_line': (lines[-1] if lines else '')[:400],
    }


def disk_bytes(folder):
    total = 0
    for root, _, files in os.walk(folder):
        for name in files:
            path = os.path.join(root, name)
            if os.path.isfile(path) and not os.path.islink(path):
                total += os.stat(path).st_blocks * 512  # what the files take, sparse ones as they are
    return total


# ----- the attacks: each makes its inputs in ``d`` and returns (argv, env) -------------------------
def fifo_opt(d):
    os.mkfifo(os.path.join(d, 'model.opt'))
    open(os.path.join(d, 'model'), 'wb').close()
    return [PARLAI, 'interactive', '-mf', 'model'], None


def dev_zero_opt(d):
    os.symlink('/dev/zero', os.path.join(d, 'model.opt'))
    open(os.path.join(d, 'model'), 'wb').close()
    return [PARLAI, 'interactive', '-mf', 'model'], None


def sparse_dictionary(d):
    with open(os.path.join(d, 'model.opt'), 'w') as f:
        json.dump({'model': 'empathy/mime', 'model_file': os.path.join(d, 'model'), 'inference': 'greedy'}, f)
    open(os.path.join(d, 'model'), 'wb').close()
    with open(os.path.join(d, 'model.dict'), 'wb') as f:
        f.truncate(20 << 30)
    return [PARLAI, 'interactive', '-mf', 'model'], None


def zoo_bomb(d):
    archive = os.path.join(d, 'bomb.tar.gz')
    with tarfile.open(archive, 'w:gz') as tar:
        opt = json.dumps({'model': 'empathy/mime'}).encode()
        info = tarfile.TarInfo('model.opt')
        info.size = len(opt)
        tar.addfile(info, io.BytesIO(opt))
        info = tarfile.TarInfo('model')
        info.size = 1 << 30
        tar.addfile(info, _Zeros(info.size))
    code = (
        'import sys; from parlai_empathy.serving import model_zoo\n'
        'try:\n model_zoo.install_archive(sys.argv[1], sys.argv[2], "v1", "empathy/mime")\n'
        'except model_zoo.ZooError as e: sys.exit(str(e))'
    )
    return [sys.executable, '-c', code, archive, os.path.join(d, 'zoo', 'mime')], None


class _Zeros(io.RawIOBase):
    def __init__(self, size):
        self.left = size

    def readable(self):
        return True

    def readinto(self, buffer):
        n = min(len(buffer), self.left)
        buffer[:n] = bytes(n)
        self.left -= n
        return n


def inflating_checkpoint(d):
    model = os.path.join(d, 'model')
    # built in a child: this process stays small, since a child's peak memory (wait4) counts the
    # parent's pages it was started from
    build = (
        'import sys, torch, zipfile\n'
        'torch.save({"model": {"w": torch.zeros(64 << 20)}}, sys.argv[1] + ".honest")  # 256 MiB\n'
        'with zipfile.ZipFile(sys.argv[1] + ".honest") as src, '
        'zipfile.ZipFile(sys.argv[1], "w", zipfile.ZIP_DEFLATED) as dst:\n'
        '    for info in src.infolist():\n'
        '        dst.writestr(info.filename, src.read(info.filename))\n'
    )
    subprocess.run([sys.executable, '-c', build, model], check=True)
    os.remove(model + '.honest')
    code = (
        'import sys; from parlai_empathy.integration.safe_loading import load_checkpoint, ModelFileError\n'
        'try:\n load_checkpoint(sys.argv[1])\nexcept ModelFileError as e: sys.exit(str(e))'
    )
    return [sys.executable, '-c', code, model], None


def released_literal(d):
    path = os.path.join(d, 'context.txt')
    with open(path, 'w') as f:
        f.write('[' + ', '.join(["'a'"] * 1_200_000) + ']')  # 6 MB
    code = (
        'import sys; from parlai_empathy.metrics.released import _context_list\n'
        'try:\n _context_list(open(sys.argv[1]).read(), sys.argv[1], 1, "context")\n'
        'except ValueError as e: sys.exit(str(e))'
    )
    return [sys.executable, '-c', code, path], None


def released_literal_within_cap(d):
    path = os.path.join(d, 'context.txt')
    with open(path, 'w') as f:
        f.write('[' + ', '.join(["'a'"] * 200_000) + ']')  # 1 MB, under the cap: read token by token
    code = (
        'import sys; from parlai_empathy.metrics.released import _context_list\n'
        'turns = _context_list(open(sys.argv[1]).read(), sys.argv[1], 1, "context")\n'
        'sys.stderr.write(f"read {len(turns):,} turns\\n")'
    )
    return [sys.executable, '-c', code, path], None


def over_limit_opt(d):
    os.makedirs(os.path.join(d, 'modules'))
    with open(os.path.join(d, 'modules', 'sideeffect.py'), 'w') as f:
        f.write(f'import os\nos.mkdir({os.path.join(d, "code-ran")!r})\nclass Agent: pass\n')
    with open(os.path.join(d, 'model.opt'), 'w') as f:
        json.dump({'model': 'sideeffect:Agent', 'pad': 'x' * (5 << 20)}, f)
    open(os.path.join(d, 'model'), 'wb').close()
    return [PARLAI, 'empathy_chat', '-mf', 'model'], {'PYTHONPATH': os.path.join(d, 'modules')}


def borrowed_class(d):
    with open(os.path.join(d, 'model.opt'), 'w') as f:
        json.dump({'model': 'parlai_empathy.agents.mime:TorchGeneratorAgent'}, f)
    open(os.path.join(d, 'model'), 'wb').close()
    return [PARLAI, 'empathy_chat', '-mf', 'model'], None


def _score(d, name, content):
    with open(os.path.join(d, name), 'wb') as f:
        f.write(content)
    return [PARLAI, 'empathy_score', '-o', name, '--bertscore-model', 'none'], None


def _episode(teacher='', model=''):
    return (
        '{"dialog": [[{"text": "hi", "eval_labels": ["hello"]%s}, {"text": "hey"%s}]]}\n' % (teacher, model)
    ).encode()


ATTACKS = [
    # (class, attack, make)
    (0, 'baseline: parlai empathy_score --help', lambda d: ([PARLAI, 'empathy_score', '--help'], None)),
    (2, 'model.opt is a FIFO; parlai interactive', fifo_opt),
    (2, 'model.opt links to /dev/zero; parlai interactive', dev_zero_opt),
    (2, 'model.dict is a sparse 20 GiB file; parlai interactive', sparse_dictionary),
    (2, 'zoo archive of ~1 MB unpacking to 1 GiB', zoo_bomb),
    (2, 'checkpoint whose deflated members inflate to 256 MiB', inflating_checkpoint),
    (2, '6 MB released-format context list', released_literal),
    (2, '1 MB released-format context list, under the cap (accepted)', released_literal_within_cap),
    (3, '5 MiB .opt naming an importable module; parlai empathy_chat', over_limit_opt),
    (3, '.opt naming a stock class imported by our mime module; parlai empathy_chat', borrowed_class),
    (
        4,
        '200,000-deep JSON world log; parlai empathy_score',
        lambda d: _score(d, 'deep.jsonl', b'[' * 200_000 + b']' * 200_000 + b'\n'),
    ),
    (
        4,
        '5,000-digit integer in a world log; parlai empathy_score',
        lambda d: _score(d, 'digits.jsonl', _episode(model=', "n": ' + '7' * 5000)),
    ),
    (
        4,
        'latin-1 TSV of outputs; parlai empathy_score',
        lambda d: _score(d, 'latin1.tsv', 'ctx\tgold\tréponse\n'.encode('latin-1')),
    ),
    (
        5,
        'NaN emotion score in a world log; parlai empathy_score',
        lambda d: _score(d, 'nan.jsonl', _episode(model=', "emotion_scores": {"sad": NaN}')),
    ),
    (
        5,
        'context_utterances a string; parlai empathy_score',
        lambda d: _score(d, 'ctx.jsonl', _episode(teacher=', "context_utterances": "oops"')),
    ),
    (5, 'NUL byte in a TSV cell; parlai empathy_score', lambda d: _score(d, 'nul.tsv', b'ctx\tgo\0ld\treply\n')),
    (
        5,
        '10 MB cell in a TSV; parlai empathy_score',
        lambda d: _score(d, 'big.tsv', b'ctx\tgold\t' + b'x' * (10 << 20) + b'\n'),
    ),
]


def ed_nul(d, ed_dir):
    folder = os.path.join(d, 'ed')
    os.makedirs(folder)
    for split in ('train', 'valid', 'test'):
        with open(os.path.join(ed_dir, f'{split}.csv'), 'rb') as src:
            lines = [src.readline() for _ in range(200)]
        if split == 'train':
            lines[5] = lines[5].replace(b' ', b'\0', 1)
        with open(os.path.join(folder, f'{split}.csv'), 'wb') as f:
            f.writelines(lines)
    return [
        PARLAI,
        'display_data',
        '-t',
        'empathy_ed_clean',
        '--ed-datapath',
        folder,
        '--datapath',
        os.path.join(d, 'dp'),
    ], None


def ed_quoting(d, ed_dir):
    """The real first 200 lines of each split, one train row rewritten as a CSV writer writes a
    field holding a comma and a line break (a quoting no ED release has)."""
    folder = os.path.join(d, 'ed')
    os.makedirs(folder)
    for split in ('train', 'valid', 'test'):
        with open(os.path.join(ed_dir, f'{split}.csv'), 'rb') as src:
            lines = [src.readline() for _ in range(200)]
        if split == 'train':
            head, _, tail = lines[5].rpartition(b',,')[0].rpartition(b',')
            lines[5] = head + b',"' + tail[:10] + b', and\n' + tail[10:] + b'",,\n'
        with open(os.path.join(folder, f'{split}.csv'), 'wb') as f:
            f.writelines(lines)
    return [
        PARLAI,
        'display_data',
        '-t',
        'empathy_ed_clean',
        '--ed-datapath',
        folder,
        '--datapath',
        os.path.join(d, 'dp'),
    ], None


def _reader(code):
    return [
        sys.executable,
        '-c',
        'import sys\nfrom parlai_empathy import evidence\ntry:\n    '
        + code
        + '\nexcept ValueError as err:\n    sys.exit(str(err))',
    ], None


def outputs_bomb(d):
    """outputs.jsonl.gz of 1 GiB of valid short rows, packed into about 2.5 MB."""
    import zlib

    packer = zlib.compressobj(9, zlib.DEFLATED, 31)
    rows = (b'{"id": "x", "reply": "' + b'0' * 1000 + b'"}\n') * (1 << 14)
    with open(os.path.join(d, 'outputs.jsonl.gz'), 'wb') as f:
        for _ in range(64):
            f.write(packer.compress(rows))
        f.write(packer.flush())
    return _reader("print(len(evidence.read_outputs('outputs.jsonl.gz')))")


def fifo_table(d):
    os.mkfifo(os.path.join(d, 'table.json'))
    return _reader("evidence.read_json('table.json')")


def deep_table(d):
    with open(os.path.join(d, 'table.json'), 'wb') as f:
        f.write(b'{"reproduce": ' + b'[' * 200_000 + b']' * 200_000 + b'}\n')
    return _reader("evidence.read_json('table.json')")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--out', default='bench/results/security_attacks.json')
    parser.add_argument(
        '--ed-dir', default=os.environ.get('PARLAI_EMPATHY_ED_DIR', '../shared/data/empatheticdialogues')
    )
    args = parser.parse_args()
    attacks = ATTACKS + [
        (5, 'ED CSV with a NUL byte; parlai display_data -t empathy_ed_clean', lambda d: ed_nul(d, args.ed_dir)),
        (
            5,
            'ED CSV with a CSV-quoted field over two lines; parlai display_data -t empathy_ed_clean',
            lambda d: ed_quoting(d, args.ed_dir),
        ),
        (2, 'outputs.jsonl.gz of ~2.5 MB unpacking to 1 GiB of rows; evidence.read_outputs', outputs_bomb),
        (2, 'table.json is a FIFO; evidence.read_json', fifo_table),
        (4, '200,000-deep table.json; evidence.read_json', deep_table),
    ]
    rows = []
    for klass, name, make in attacks:
        scratch = tempfile.mkdtemp(prefix='attack-')
        try:
            argv, env = make(scratch)
            before = disk_bytes(scratch)
            row = measured(argv, scratch, env)
            written = max(0, disk_bytes(scratch) - before)
            row.update({'class': klass, 'attack': name, 'disk_written_bytes': written})
            if 'code-ran' in os.listdir(scratch):
                row['code_ran'] = True
            rows.append(row)
            print(json.dumps(row), flush=True)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    import resource

    meta = {
        'command': 'python bench/security_attacks.py',
        'cpu': _cpu(),
        'cores': os.cpu_count(),
        'bench_process_peak_rss_mb': round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        'python': platform.python_version(),
        'load_average_after': list(os.getloadavg()),
        'note': 'contended: other jobs shared the cores',
    }
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, 'w') as f:
        json.dump({'meta': meta, 'rows': rows}, f, indent=1)
    print(table(rows))


def _cpu():
    try:
        with open('/proc/cpuinfo') as f:
            for line in f:
                if line.startswith('model name'):
                    return line.split(':', 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def table(rows):
    out = [
        '| class | attack | outcome | exit | seconds | peak memory | disk written |',
        '|---|---|---|---|---|---|---|',
    ]
    for r in rows:
        outcome = r.get('outcome') or r['last_line'].replace('|', '\\|')
        if r.get('traceback'):
            outcome += ' (TRACEBACK)'
        if r.get('code_ran'):
            outcome += ' (CODE RAN)'
        out.append(
            f'| {r["class"] or "-"} | {r["attack"]} | {outcome[:160]} | {r.get("rc", "-")} | '
            f'{r["seconds"]} | {r.get("peak_rss_mb", "-")} MB | {r["disk_written_bytes"]:,} B |'
        )
    return '\n'.join(out)


if __name__ == '__main__':
    main()
