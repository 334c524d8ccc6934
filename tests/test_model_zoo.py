"""``zoo:empathy/<name>/model`` end to end: package a tiny trained model, serve the release from a
local HTTP server on 127.0.0.1, chat with it through the stock ``parlai interactive``; a tampered
archive is refused and leaves nothing installed, and so is one whose checksum matches but whose
``model.opt`` names another agent than the manifest's (a stock ParlAI agent would unpickle its
checkpoint); without a mirror the error says how to build it.
"""

import json
import os
import shlex
import shutil
import subprocess
import sys
import tarfile

import pytest

from local_server import LocalServer
from parlai_empathy.data.ed_source import file_checksum
from parlai_empathy.serving import model_zoo, packaging
from tiny_models import PARLAI, cached_tiny_model, hostile_stock_model, train_args

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CARD_SECTIONS = [
    '## Model Details',
    '### Quick Usage',
    '### Sample Input And Output',
    '## Intended Use',
    '## Limitations',
    '## Privacy',
    '## Datasets Used',
    '## Evaluation Results',
    '## Related Paper(s)',
    '## Hyperparameters',
    '## Feedback',
]


def parlai(*args, env=None, input=None, cwd=None, check=True):
    done = subprocess.run(
        [PARLAI] + [str(a) for a in args],
        input=input,
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=3600,
        env=dict(os.environ, HF_HUB_OFFLINE='1', **(env or {})),
    )
    if check:
        assert done.returncode == 0, f'parlai {args[0]} failed:\n{done.stdout[-3000:]}\n{done.stderr[-4000:]}'
    return done


def mirror(folder) -> LocalServer:
    """``python -m http.server`` on 127.0.0.1 serving one folder, as a release mirror would."""
    return LocalServer(
        lambda port: [sys.executable, '-m', 'http.server', port, '--bind', '127.0.0.1', '--directory', folder]
    )


@pytest.fixture(scope='module')
def release(tmp_path_factory):
    """The tiny MIME packaged as zoo entry "mime", and a manifest that lists this archive."""
    root = tmp_path_factory.mktemp('release')
    manifest = root / 'manifest.json'
    shutil.copy(model_zoo.default_manifest_path(), manifest)
    done = parlai(
        'empathy_package_model',
        '-mf',
        cached_tiny_model(tmp_path_factory, 'mime'),
        '--name',
        'mime',
        '--outdir',
        root / 'mirror',
        '--manifest',
        manifest,
        '--project',
        'majumder2020_mime',
        '--row',
        'mime',
        '--projects-dir',
        os.path.join(REPO, 'projects'),
        '--results',
        os.path.join(REPO, 'projects', 'leaderboard', 'results.json'),
        cwd=root,
    )
    entry = model_zoo.load_manifest(str(manifest))['mime']
    return {
        'root': root,
        'manifest': str(manifest),
        'entry': entry,
        'log': done.stdout,
        'archive': root / 'mirror' / entry.file,
    }


def test_package_is_a_verifiable_release_with_a_model_card(release):
    entry, archive = release['entry'], release['archive']
    assert entry.sha256 == file_checksum(str(archive)) and entry.size == os.path.getsize(archive)
    with open(f'{archive}.sha256') as f:
        assert f.read().split() == [entry.sha256, entry.file]
    with tarfile.open(archive) as tar:
        names = tar.getnames()
        opt = json.load(tar.extractfile('model.opt'))
        card = tar.extractfile('model.card.md').read().decode('utf-8')
    assert {'model', 'model.opt', 'model.dict', 'model.card.md'} <= set(names)
    local = [f'{k}={v}' for k, v in opt.items() if isinstance(v, str) and (v.startswith('/') or v.startswith('~'))]
    assert not local, f'paths of the packaging machine in model.opt: {local}'
    positions = [card.index(section) for section in CARD_SECTIONS]
    assert positions == sorted(positions), "the card follows ParlAI's model-card layout"
    assert 'CC BY-NC 4.0' in card and 'zoo:empathy/mime/model' in card
    assert 'parlai empathy_reproduce --project majumder2020_mime --rows mime' in card
    # the row's figures from the board the artifacts build, whose rows are named project/row
    with open(os.path.join(REPO, 'projects', 'majumder2020_mime', 'runs', 'mime', 'report.json')) as f:
        committed = json.load(f)['values']
    assert f'{committed["emo_acc"]:.4g}' in card.split('## Evaluation Results')[1]
    with open(release['root'] / 'mirror' / entry.card) as f:
        assert f.read() == card


def test_interactive_with_the_zoo_model_from_a_local_mirror(release, tmp_path):
    server = mirror(release['root'] / 'mirror')
    datapath = tmp_path / 'data'
    try:
        done = parlai(
            'interactive',
            '-mf',
            'zoo:empathy/mime/model',
            '--datapath',
            datapath,
            '--display-add-fields',
            'predicted_emotion',
            input='I lost my wallet today.\n[EXIT]\n',
            env={model_zoo.ZOO_URL_ENV: server.url, model_zoo.MANIFEST_ENV: release['manifest']},
        )
    finally:
        server.stop()
    assert '[Mime]:' in done.stdout and '[predicted_emotion]:' in done.stdout, done.stdout[-3000:]
    folder = datapath / 'models' / 'empathy' / 'mime'
    assert model_zoo.installed_version(str(folder)) == release['entry'].done_version
    assert (folder / 'model.card.md').is_file()


def test_a_tampered_archive_is_refused_and_nothing_is_installed(release, tmp_path):
    served = tmp_path / 'mirror'
    served.mkdir()
    data = bytearray(release['archive'].read_bytes())
    data[len(data) // 2] ^= 0xFF  # one flipped byte, same name and size
    (served / release['entry'].file).write_bytes(bytes(data))
    server = mirror(served)
    datapath = tmp_path / 'data'
    try:
        done = parlai(
            'interactive',
            '-mf',
            'zoo:empathy/mime/model',
            '--datapath',
            datapath,
            input='hi\n[EXIT]\n',
            env={model_zoo.ZOO_URL_ENV: server.url, model_zoo.MANIFEST_ENV: release['manifest']},
            check=False,
        )
    finally:
        server.stop()
    assert done.returncode == 1 and 'Traceback' not in done.stderr, done.stderr[-3000:]
    assert 'was refused: its sha256 does not match the manifest entry' in done.stderr, done.stderr[-3000:]
    zoo_dir = datapath / 'models' / 'empathy'
    left = [p.name for p in zoo_dir.iterdir() if not p.name.endswith('.lock')] if zoo_dir.exists() else []
    assert left == [], f'left behind: {left}'


def printed_commands(message):
    """The ``parlai ...`` lines of a zoo message, as argument lists (without ``parlai``)."""
    return [shlex.split(line.strip())[1:] for line in message.splitlines() if line.startswith('  parlai ')]


def test_without_a_mirror_the_message_names_the_build_commands_which_work(tmp_path_factory, tmp_path):
    env = {model_zoo.ZOO_URL_ENV: ''}
    datapath = tmp_path / 'data'
    done = parlai(
        'interactive',
        '-mf',
        'zoo:empathy/minilm_ranker/model',
        '--datapath',
        datapath,
        input='hi\n[EXIT]\n',
        env=env,
        check=False,
        cwd=tmp_path,
    )
    assert done.returncode == 1
    assert 'Traceback' not in done.stderr, done.stderr[-3000:]  # the message alone
    entry = model_zoo.describe('minilm_ranker')
    assert f'Build it here ({entry.build_time()}), then run your command again:' in done.stderr, done.stderr
    reproduce_args, package_args = printed_commands(done.stderr)
    assert reproduce_args == ['empathy_reproduce', '--project', 'rashkin2019_empatheticdialogues', '--rows', 'bert_ft']
    assert package_args[-2:] == ['--datapath', str(datapath)]  # installed where this command looks
    # the first command, as printed, from a folder outside any clone (a dry run: the real one trains for hours)
    planned = parlai(*reproduce_args, '--dry-run', cwd=tmp_path)
    assert f'-mf {tmp_path}/runs/rashkin2019_empatheticdialogues/bert_ft/model' in planned.stdout
    # the second, as printed, on the model the first leaves there (a tiny ranker here), makes zoo: find it
    row_dir = tmp_path / 'runs' / 'rashkin2019_empatheticdialogues' / 'bert_ft'
    row_dir.parent.mkdir(parents=True)
    row_dir.symlink_to(os.path.dirname(cached_tiny_model(tmp_path_factory, 'bert_ranker')))
    parlai(*package_args, cwd=tmp_path)
    done = parlai(
        'interactive',
        '-mf',
        'zoo:empathy/minilm_ranker/model',
        '--datapath',
        datapath,
        input='My dog ran away this morning.\n[EXIT]\n',
        env=env,
        cwd=tmp_path,
    )
    replies = [line for line in done.stdout.splitlines() if '[BertRanker]:' in line]
    assert len(replies) == 1 and replies[0].split(']:', 1)[1].strip(), done.stdout[-3000:]


def test_every_entrys_build_commands_parse_and_say_what_the_row_took(tmp_path):
    """Each printed command goes through its real ParlAI parser (no made-up flag), and the time is
    the committed row's, from its meta.json, with the machine it was measured on."""
    from parlai.core.script import SCRIPT_REGISTRY, setup_script_registry

    from parlai_empathy.evidence import reproduce

    setup_script_registry()
    entries = model_zoo.load_manifest()
    assert sorted(entries) == ['ethreed', 'mime', 'minilm_ranker']
    for name in entries:
        with pytest.raises(model_zoo.ZooModelUnavailable) as err:
            model_zoo.download(str(tmp_path / 'data'), name)
        commands = printed_commands(str(err.value))
        assert [c[0] for c in commands] == ['empathy_reproduce', 'empathy_package_model'], str(err.value)
        for argv in commands:
            SCRIPT_REGISTRY[argv[0]].klass.setup_args().parse_args(argv[1:])
    meta = json.loads(open(os.path.join(REPO, 'projects', 'majumder2020_mime', 'runs', 'mime', 'meta.json')).read())
    took = reproduce.duration_words(meta['training']['train_time'] + meta['evaluation_seconds'])
    with pytest.raises(model_zoo.ZooModelUnavailable) as err:
        model_zoo.download(str(tmp_path / 'data'), 'mime')
    assert f'(about {took} on {reproduce.machine_words(meta["machine"])}, as the committed row took)' in str(err.value)
    assert 'on 2 CPU cores' in str(err.value)


def test_the_committed_manifest_publishes_no_checksum_nobody_can_download():
    """No mirror serves any archive yet, and a checksum without a mirror names a file nobody can
    download: a release adds its sha256 and size together with the mirror that serves it."""
    published = {
        name: e.file
        for name, e in model_zoo.load_manifest(os.path.join(REPO, 'zoo', 'empathy', 'manifest.json')).items()
        if e.sha256
    }
    assert published == {}


def test_an_entry_without_a_checksum_is_not_fetched_from_a_mirror(release, tmp_path):
    """A mirror serving the archive is not enough: without the manifest's sha256 nothing could
    vouch for the file, so nothing is requested and the message says how to build it."""
    manifest = tmp_path / 'manifest.json'
    data = json.loads(open(release['manifest']).read())
    data['models']['mime'].update(sha256=None, size=None)
    manifest.write_text(json.dumps(data))
    server = mirror(release['root'] / 'mirror')
    try:
        done = parlai(
            'interactive',
            '-mf',
            'zoo:empathy/mime/model',
            '--datapath',
            tmp_path / 'data',
            input='hi\n[EXIT]\n',
            check=False,
            cwd=tmp_path,
            env={model_zoo.ZOO_URL_ENV: server.url, model_zoo.MANIFEST_ENV: str(manifest)},
        )
        log = server.output()
    finally:
        server.stop()
    assert done.returncode == 1 and 'Traceback' not in done.stderr, done.stderr[-3000:]
    assert f'no release of it is published (the manifest has no sha256 for {release["entry"].file})' in done.stderr
    assert 'parlai empathy_reproduce --project majumder2020_mime --rows mime' in done.stderr
    assert release['entry'].file not in log  # never requested


def test_a_zoo_entry_is_built_from_its_rows_plan_in_one_command(tmp_path_factory, tmp_path):
    """``parlai empathy_package_model --zoo-entry mime`` runs the two printed commands: the row's
    plan (here a tiny MIME in place of the real one) and the package, installed for zoo:."""
    projects = tmp_path / 'projects'
    shutil.copytree(
        os.path.join(REPO, 'projects', 'majumder2020_mime'),
        projects / 'majumder2020_mime',
        ignore=shutil.ignore_patterns('runs', '*.png'),
    )
    spec_path = projects / 'majumder2020_mime' / 'table.json'
    spec = json.loads(spec_path.read_text())
    spec['reproduce']['rows']['mime']['cpu'] = [
        {'name': 'train', 'parlai': [str(a) for a in train_args('mime', '{model}')]}
    ]
    spec_path.write_text(json.dumps(spec))
    env = {'PARLAI_EMPATHY_PROJECTS_DIR': str(projects), model_zoo.ZOO_URL_ENV: ''}
    datapath = tmp_path / 'data'
    planned = parlai(
        'empathy_package_model', '--zoo-entry', 'mime', '--datapath', datapath, '--dry-run', env=env, cwd=tmp_path
    )
    assert 'no committed run' in planned.stdout  # this copy has no runs/ to time it by
    built = parlai('empathy_package_model', '--zoo-entry', 'mime', '--datapath', datapath, env=env, cwd=tmp_path)
    assert 'parlai empathy_reproduce --project majumder2020_mime --rows mime\n' in built.stdout
    assert f'installed in {datapath}/models/empathy/mime' in built.stdout
    done = parlai(
        'interactive',
        '-mf',
        'zoo:empathy/mime/model',
        '--datapath',
        datapath,
        input='I lost my wallet today.\n[EXIT]\n',
        env=env,
        cwd=tmp_path,
    )
    assert '[Mime]:' in done.stdout, done.stdout[-3000:]


def test_manifest_errors_name_file_line_and_field(tmp_path):
    path = tmp_path / 'manifest.json'
    good = {
        'file': 'x-v1.tar.gz',
        'card': 'x-v1.card.md',
        'version': 'v1',
        'project': 'p',
        'row': 'r',
        'sha256': 'ab' * 32,
        'size': 10,
        'agent': 'empathy/mime',
    }
    path.write_text(json.dumps({'models': {'ok': good, 'bad': dict(good, sha256='not-hex')}}, indent=2))
    with pytest.raises(model_zoo.ManifestError) as err:
        model_zoo.load_manifest(str(path))
    assert str(err.value).startswith(f'{path}, line 13: models.bad.sha256:')
    path.write_text('{"models": {"x": ')
    with pytest.raises(model_zoo.ManifestError, match=r'line 1: not valid JSON for a zoo manifest \(.* column \d+\)'):
        model_zoo.load_manifest(str(path))
    fifo = tmp_path / 'fifo.json'  # PARLAI_EMPATHY_ZOO_MANIFEST is the user's to set: never block on it
    os.mkfifo(fifo)
    with pytest.raises(model_zoo.ManifestError, match='a FIFO, not a regular file'):
        model_zoo.load_manifest(str(fifo))
    for agent, problem in (
        (None, 'missing or not a non-empty string (got None)'),
        ('transformer/generator', "'transformer/generator' is not an agent of parlai-empathy"),
    ):
        path.write_text(json.dumps({'models': {'bad': dict(good, agent=agent)}}, indent=2))
        with pytest.raises(model_zoo.ManifestError) as err:
            model_zoo.load_manifest(str(path))
        assert str(err.value).startswith(f'{path}, line 3: models.bad.agent: {problem}'), str(err.value)


def test_an_archive_reaching_outside_its_folder_is_refused(tmp_path):
    evil = tmp_path / 'evil.tar.gz'
    (tmp_path / 'payload').write_text('x')
    with tarfile.open(evil, 'w:gz') as tar:
        tar.add(tmp_path / 'payload', arcname='model')
        tar.add(tmp_path / 'payload', arcname='../outside')
    target = tmp_path / 'zoo' / 'evil'
    with pytest.raises(model_zoo.ZooError, match="refused member '../outside'"):
        model_zoo.install_archive(str(evil), str(target), 'v1', 'empathy/mime')
    assert not target.exists() and not (tmp_path / 'outside').exists()
    assert [p.name for p in (tmp_path / 'zoo').iterdir()] == ['evil.lock']


def hostile_release(tmp_path):
    """A stock transformer/generator folder whose checkpoint creates ``code-ran`` when unpickled,
    released as zoo entry "mime" the way a real release is: archive, manifest sha256 and size."""
    marker = tmp_path / 'code-ran'
    model_file = hostile_stock_model(tmp_path / 'stock', marker)
    served = tmp_path / 'mirror'
    served.mkdir()
    archive = packaging.write_archive(os.path.dirname(model_file), str(served / 'mime-v9.tar.gz'))
    data = json.loads(open(model_zoo.default_manifest_path()).read())
    data['models']['mime'].update(
        file='mime-v9.tar.gz', version='v9', sha256=file_checksum(archive), size=os.path.getsize(archive)
    )
    manifest = tmp_path / 'manifest.json'
    manifest.write_text(json.dumps(data, indent=2))
    return served, str(manifest), marker


def test_a_release_of_a_stock_agent_is_refused_before_it_is_unpacked(tmp_path):
    """Its checksum, size and mirror all match the manifest, but its model.opt names a stock agent,
    which would unpickle the checkpoint: the install (ParlAI's zoo hook, here under the stock
    ``parlai interactive``) stops with the message, nothing unpacked, installed or run."""
    served, manifest, marker = hostile_release(tmp_path)
    server = mirror(served)
    datapath = tmp_path / 'data'
    try:
        done = parlai(
            'interactive',
            '-mf',
            'zoo:empathy/mime/model',
            '--datapath',
            datapath,
            input='hi\n[EXIT]\n',
            env={model_zoo.ZOO_URL_ENV: server.url, model_zoo.MANIFEST_ENV: manifest},
            check=False,
            cwd=tmp_path,
        )
    finally:
        server.stop()
    assert done.returncode == 1 and 'Traceback' not in done.stderr, done.stderr[-3000:]
    assert 'mime-v9.tar.gz: model.opt, line ' in done.stderr, done.stderr[-3000:]
    assert 'field "model" names \'transformer/generator\', which is not an agent of parlai-empathy' in done.stderr
    assert 'nothing was unpacked or installed' in done.stderr and '--trust-model-file' in done.stderr
    assert not marker.exists(), 'code from the archive ran'
    zoo_dir = datapath / 'models' / 'empathy'
    left = [p.name for p in zoo_dir.iterdir() if not p.name.endswith('.lock')] if zoo_dir.exists() else []
    assert left == [], f'left behind: {left}'


def test_an_archive_of_another_of_our_agents_or_an_installed_stock_folder_is_refused(tmp_path_factory, tmp_path):
    """The archive must name the manifest entry's own agent; and a folder already installed under
    the entry's name (by other means, or edited since) is checked the same way before it is used."""
    import parlai.core.build_data as build_data

    folder = tmp_path / 'ethreed'
    shutil.copytree(os.path.dirname(cached_tiny_model(tmp_path_factory, 'ethreed')), folder)
    archive = packaging.write_archive(str(folder), str(tmp_path / 'x.tar.gz'))
    target = tmp_path / 'zoo' / 'mime'
    with pytest.raises(
        model_zoo.ZooError,
        match=r"model.opt, line \d+: field \"model\" names 'empathy/ethreed', "
        r"but the manifest entry says 'empathy/mime'",
    ):
        model_zoo.install_archive(archive, str(target), 'v1', 'empathy/mime')
    assert not target.exists()
    served, manifest, marker = hostile_release(tmp_path)
    datapath = tmp_path / 'data'
    installed = model_zoo.model_dir(str(datapath), 'mime')
    shutil.copytree(tmp_path / 'stock', installed)
    build_data.mark_done(installed, version_string=model_zoo.load_manifest(manifest)['mime'].done_version)
    with pytest.raises(model_zoo.ZooError) as err:
        model_zoo.download(str(datapath), 'mime', manifest)
    assert f'{installed}/model.opt, line ' in str(err.value) and "names 'transformer/generator'" in str(err.value)
    assert not marker.exists()
