"""``zoo:empathy/<name>/model`` end to end: package a tiny trained model, serve the release from a
local HTTP server on 127.0.0.1, chat with it through the stock ``parlai interactive``; a tampered
archive is refused and leaves nothing installed; without a mirror the error says how to build it.
"""
import json
import os
import shutil
import subprocess
import sys
import tarfile

import pytest

from local_server import LocalServer
from parlai_empathy import model_zoo
from parlai_empathy.data.ed_source import file_checksum
from tiny_models import PARLAI, cached_tiny_model

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CARD_SECTIONS = ['## Model Details', '### Quick Usage', '### Sample Input And Output', '## Intended Use',
                 '## Limitations', '## Privacy', '## Datasets Used', '## Evaluation Results',
                 '## Related Paper(s)', '## Hyperparameters', '## Feedback']


def parlai(*args, env=None, input=None, cwd=None, check=True):
    done = subprocess.run([PARLAI] + [str(a) for a in args], input=input, capture_output=True, text=True,
                          cwd=cwd, timeout=3600, env=dict(os.environ, HF_HUB_OFFLINE='1', **(env or {})))
    if check:
        assert done.returncode == 0, f'parlai {args[0]} failed:\n{done.stdout[-3000:]}\n{done.stderr[-4000:]}'
    return done


def mirror(folder) -> LocalServer:
    """``python -m http.server`` on 127.0.0.1 serving one folder, as a release mirror would."""
    return LocalServer(lambda port: [sys.executable, '-m', 'http.server', port, '--bind', '127.0.0.1',
                                     '--directory', folder])


@pytest.fixture(scope='module')
def release(tmp_path_factory):
    """The tiny MIME packaged as zoo entry "mime", and a manifest that lists this archive."""
    root = tmp_path_factory.mktemp('release')
    manifest = root / 'manifest.json'
    shutil.copy(model_zoo.default_manifest_path(), manifest)
    done = parlai('empathy_package_model', '-mf', cached_tiny_model(tmp_path_factory, 'mime'), '--name', 'mime',
                  '--outdir', root / 'mirror', '--manifest', manifest, '--project', 'majumder2020_mime',
                  '--row', 'mime', '--projects-dir', os.path.join(REPO, 'projects'),
                  '--results', os.path.join(REPO, 'bench', 'leaderboard', 'results.json'), cwd=root)
    entry = model_zoo.load_manifest(str(manifest))['mime']
    return {'root': root, 'manifest': str(manifest), 'entry': entry, 'log': done.stdout,
            'archive': root / 'mirror' / entry.file}


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
    assert positions == sorted(positions), 'the card follows ParlAI\'s model-card layout'
    assert 'CC BY-NC 4.0' in card and 'zoo:empathy/mime/model' in card
    assert 'parlai empathy_reproduce --project majumder2020_mime --rows mime' in card
    # the row's figures from the board the artifacts build, whose rows are named project/row
    with open(os.path.join(REPO, 'projects', 'majumder2020_mime', 'runs', 'mime', 'report.json')) as f:
        committed = json.load(f)['values']
    assert f"{committed['emo_acc']:.4g}" in card.split('## Evaluation Results')[1]
    with open(release['root'] / 'mirror' / entry.card) as f:
        assert f.read() == card


def test_interactive_with_the_zoo_model_from_a_local_mirror(release, tmp_path):
    server = mirror(release['root'] / 'mirror')
    datapath = tmp_path / 'data'
    try:
        done = parlai('interactive', '-mf', 'zoo:empathy/mime/model', '--datapath', datapath,
                      '--display-add-fields', 'predicted_emotion', input='I lost my wallet today.\n[EXIT]\n',
                      env={model_zoo.ZOO_URL_ENV: server.url, model_zoo.MANIFEST_ENV: release['manifest']})
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
        done = parlai('interactive', '-mf', 'zoo:empathy/mime/model', '--datapath', datapath, input='hi\n[EXIT]\n',
                      env={model_zoo.ZOO_URL_ENV: server.url, model_zoo.MANIFEST_ENV: release['manifest']},
                      check=False)
    finally:
        server.stop()
    assert done.returncode != 0
    assert 'was refused: its sha256 does not match the manifest entry' in done.stderr, done.stderr[-3000:]
    zoo_dir = datapath / 'models' / 'empathy'
    left = [p.name for p in zoo_dir.iterdir() if not p.name.endswith('.lock')] if zoo_dir.exists() else []
    assert left == [], f'left behind: {left}'


def test_without_a_mirror_the_error_names_the_build_commands_which_work(tmp_path_factory, tmp_path):
    env = {model_zoo.ZOO_URL_ENV: ''}
    datapath = tmp_path / 'data'
    done = parlai('interactive', '-mf', 'zoo:empathy/minilm_ranker/model', '--datapath', datapath,
                  input='hi\n[EXIT]\n', env=env, check=False)
    assert done.returncode != 0
    assert 'parlai empathy_reproduce --project rashkin2019_empatheticdialogues --rows bert_ft --bert offline-minilm' \
        in done.stderr, done.stderr[-3000:]
    assert '--name minilm_ranker --install-zoo' in done.stderr
    # the second command, as the message gives it, makes zoo: find the model (a tiny ranker here)
    ranker = cached_tiny_model(tmp_path_factory, 'bert_ranker')
    parlai('empathy_package_model', '-mf', ranker, '--name', 'minilm_ranker', '--install-zoo',
           '--datapath', datapath, '--outdir', tmp_path / 'release', cwd=tmp_path)
    done = parlai('interactive', '-mf', 'zoo:empathy/minilm_ranker/model', '--datapath', datapath,
                  input='My dog ran away this morning.\n[EXIT]\n', env=env, cwd=tmp_path)
    replies = [line for line in done.stdout.splitlines() if '[BertRanker]:' in line]
    assert len(replies) == 1 and replies[0].split(']:', 1)[1].strip(), done.stdout[-3000:]


def test_manifest_errors_name_file_line_and_field(tmp_path):
    path = tmp_path / 'manifest.json'
    good = {'file': 'x-v1.tar.gz', 'card': 'x-v1.card.md', 'version': 'v1', 'project': 'p', 'row': 'r',
            'sha256': 'ab' * 32, 'size': 10}
    path.write_text(json.dumps({'models': {'ok': good, 'bad': dict(good, sha256='not-hex')}}, indent=2))
    with pytest.raises(model_zoo.ManifestError) as err:
        model_zoo.load_manifest(str(path))
    assert str(err.value).startswith(f'{path}, line 12: models.bad.sha256:')
    path.write_text('{"models": {"x": ')
    with pytest.raises(model_zoo.ManifestError, match=r'line 1, column \d+: not valid JSON'):
        model_zoo.load_manifest(str(path))


def test_an_archive_reaching_outside_its_folder_is_refused(tmp_path):
    evil = tmp_path / 'evil.tar.gz'
    (tmp_path / 'payload').write_text('x')
    with tarfile.open(evil, 'w:gz') as tar:
        tar.add(tmp_path / 'payload', arcname='model')
        tar.add(tmp_path / 'payload', arcname='../outside')
    target = tmp_path / 'zoo' / 'evil'
    with pytest.raises(model_zoo.ZooError, match="refused member '../outside'"):
        model_zoo.install_archive(str(evil), str(target), 'v1')
    assert not target.exists() and not (tmp_path / 'outside').exists()
    assert [p.name for p in (tmp_path / 'zoo').iterdir()] == ['evil.lock']
