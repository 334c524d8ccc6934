"""``--bert-model offline-mpnet``: all-mpnet-base-v2 joined from five PyPI packages (extra [mpnet]).

The joining is tested on a small split zip made here; the real model once its packages are
installed. Without them that test is skipped with its reason in the warnings summary, which
pytest prints even in quiet mode.
"""

import hashlib
import importlib.metadata
import os
import warnings
import zipfile

import pytest

from parlai_empathy.files import offline_models


def _split_zip(tmp_path, pieces=3):
    archive = tmp_path / 'model.zip'
    with zipfile.ZipFile(archive, 'w') as z:
        z.writestr('model/config.json', '{"model_type": "bert"}')
        z.writestr('model/sub/weights.bin', os.urandom(5000))
        z.writestr('model/desktop.ini', 'stray')
        z.writestr('elsewhere.txt', 'not ours')
    data = archive.read_bytes()
    size = -(-len(data) // pieces)
    paths = []
    for i in range(pieces):
        path = tmp_path / f'model.zip.{i + 1:03d}'
        path.write_bytes(data[i * size : (i + 1) * size])
        paths.append(str(path))
    return paths, hashlib.sha256(data).hexdigest()


def test_split_zip_is_joined_checked_and_unpacked_once(tmp_path):
    pieces, sha256 = _split_zip(tmp_path)
    out = str(tmp_path / 'data' / 'encoders' / 'model')
    assert offline_models.assemble_split_zip(pieces, sha256, out, 'model') == out
    assert sorted(os.listdir(out)) == ['.built', 'config.json', 'sub']  # no desktop.ini, nothing else
    assert open(os.path.join(out, 'config.json')).read() == '{"model_type": "bert"}'
    assert os.listdir(os.path.dirname(out)) == ['model']  # no temporary files left behind
    built = os.stat(os.path.join(out, '.built')).st_mtime_ns
    for piece in pieces:  # once built, the pieces are not read again
        os.remove(piece)
    assert offline_models.assemble_split_zip(pieces, sha256, out, 'model') == out
    assert os.stat(os.path.join(out, '.built')).st_mtime_ns == built


def test_damaged_pieces_are_refused_and_leave_nothing(tmp_path):
    pieces, sha256 = _split_zip(tmp_path)
    out = str(tmp_path / 'data' / 'model')
    with pytest.raises(offline_models.OfflineModelMissing, match='not the expected'):
        offline_models.assemble_split_zip(pieces[::-1], sha256, out, 'model')  # pieces out of order
    assert os.listdir(tmp_path / 'data') == []
    os.makedirs(out)  # an unfinished folder (no marker) is replaced
    offline_models.assemble_split_zip(pieces, sha256, out, 'model')
    assert os.path.isfile(os.path.join(out, '.built'))


def test_missing_packages_name_the_extra(monkeypatch, tmp_path):
    real = importlib.metadata.distribution

    def without_part_3(name):
        if name == offline_models.MPNET_PARTS[2]:
            raise importlib.metadata.PackageNotFoundError(name)
        return real(name)

    monkeypatch.setattr(offline_models.importlib.metadata, 'distribution', without_part_3)
    with pytest.raises(offline_models.OfflineModelMissing) as err:
        offline_models.resolve_encoder('offline-mpnet', str(tmp_path))
    assert 'parlai-empathy[mpnet]' in str(err.value) and offline_models.MPNET_PARTS[2] in str(err.value)
    assert not (tmp_path / 'empathy_encoders').exists()


def _mpnet_installed():
    try:
        offline_models.mpnet_pieces()
    except offline_models.OfflineModelMissing as missing:
        reason = f'offline-mpnet not tested: {missing}'
        warnings.warn(reason, stacklevel=2)
        pytest.skip(reason)


def test_real_offline_mpnet_is_assembled_verified_and_encodes():
    """The real 404 MB zip, joined once into ParlAI's default datapath (later runs reuse it)."""
    import torch

    from parlai_empathy.models.bi_encoder import BiEncoder, load_tokenizer

    _mpnet_installed()
    folder = offline_models.resolve_encoder('offline-mpnet')
    assert folder.endswith(os.path.join('empathy_encoders', 'all-mpnet-base-v2'))
    assert os.path.getsize(os.path.join(folder, 'model.safetensors')) == 437_971_872
    tokenizer = load_tokenizer(folder)
    ids = tokenizer(['I lost my job today.', 'That is awful, I am so sorry.'], padding=True, return_tensors='pt')[
        'input_ids'
    ]
    model = BiEncoder.from_pretrained(
        folder,
        share_encoders=True,
        pooling='mean',
        similarity='cosine',
        projection_dim=0,
        pad_id=tokenizer.pad_token_id,
    ).eval()
    with torch.no_grad():
        vectors = model.encode_context(ids)
    assert vectors.shape == (2, 768) and torch.isfinite(vectors).all()
    assert 0.2 < float(vectors[0] @ vectors[1]) < 0.99  # related sentences, not the same vector
