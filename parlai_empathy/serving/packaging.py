"""A trained model as a release: ``parlai empathy_package_model -mf M --name NAME``.

The archive ``<name>-<version>.tar.gz`` unpacks into the folder that ``zoo:empathy/<name>/model``
points at and holds everything the model needs at the prompt, on any machine:

* ``model``: the weights only (the optimizer state is left out), loadable with
  ``torch.load(weights_only=True)``;
* ``model.opt`` with no path of the packaging machine: files packed beside the weights are named
  ``model_dir:<file>`` (resolved against the model's folder when it is loaded, see
  :mod:`parlai_empathy.agents.safety`), training-only inputs (GloVe files, ED folders, tag caches)
  are dropped;
* ``model.dict`` (and the tokenizer/config folder ``model.hf`` of classifiers, with their
  decision threshold in ``model.opt``; ParlAI's ``model.dict.opt`` is never read, and left out);
* for rankers, the retrieval pool and its encodings (``model.<pool>.encs``), the encoder folder
  when it was a local one, and the EmoPrepend classifier when there is one;
* ``model.card.md``, the model card (:mod:`parlai_empathy.serving.model_card`), also written beside the
  archive, with ``<archive>.sha256``.

Before the archive is written, the staged folder is loaded like a user would (``interactive``
mode) and answers a sample message: the card shows that exchange, and a package that does not
load is never written.
"""

import gzip
import json
import os
import tarfile
import tempfile
from dataclasses import dataclass
from typing import Dict, List, Optional

from parlai_empathy.agents.safety import MODEL_DIR_PREFIX
from parlai_empathy.data.ed_source import file_checksum
from parlai_empathy.files.bounded import FileRefused, copy_folder, copy_regular, load_json_file
from parlai_empathy.files.cache_lock import atomic_write
from parlai_empathy.integration.safe_loading import (
    NO_OPT_IN_ADVICE,
    ModelFileError,
    check_model_trust,
    load_checkpoint,
    model_folder,
)

SAMPLE_MESSAGE = 'I finally got the job I wanted after months of trying!'
# options that name files of the training machine and mean nothing elsewhere
DROPPED = (
    'model_file',
    'dict_file',
    'init_model',
    'init_opt',
    'datapath',
    'parlai_home',
    'download_path',
    'candidate_encodings_cache',
    'starttime',
    'tag_cache_dir',
    'glove_path',
)


class PackagingError(ValueError):
    pass


@dataclass
class Package:
    archive: str
    sha256: str
    size: int
    card: str
    manifest_fields: Dict
    sample: Dict


# packaging copies the files an agent of ours needs and nothing else: another agent's file is
# refused however much the user trusts it (and nothing it names is imported)
def agent_name(model_file: str) -> str:
    """``empathy/<module>`` of the agent ``model_file.opt`` names, whichever way ``-m`` named it;
    a :class:`PackagingError` for a file of any other agent or a missing or broken ``.opt``."""
    try:
        return model_folder(model_file, advice=NO_OPT_IN_ADVICE).ours
    except ModelFileError as err:
        raise PackagingError(str(err)) from None


def is_local_path(value) -> bool:
    return isinstance(value, str) and (os.path.isabs(value) or value.startswith('~'))


def _copy_dir(src: str, dst: str) -> None:
    copy_folder(src, dst, f'the folder {src}')


class Stager:
    """Builds the release folder of one model file."""

    def __init__(self, model_file: str, stage: str, pool: Optional[str] = None):
        self.model_file, self.stage, self.pool = model_file, stage, pool
        self.agent = agent_name(model_file)  # before anything reads the file further
        try:  # read again as the checks above read it: a file swapped since is refused the same way
            self.opt = load_json_file(model_file + '.opt', 'an options file', 'opt_bytes')
        except FileRefused as err:
            raise PackagingError(str(err)) from None
        self.opt['model'] = self.agent  # the release names the agent as the zoo manifest does
        self.packed: Dict[str, str] = {}  # option -> model_dir: value
        self.dropped: List[str] = []

    def stage_all(self) -> Dict:
        import torch

        os.makedirs(self.stage, exist_ok=True)
        states = load_checkpoint(self.model_file)  # a file that needs unpickling is refused here too
        weights = {'model': states['model']}
        if 'number_training_updates' in states:
            weights['number_training_updates'] = states['number_training_updates']
        torch.save(weights, os.path.join(self.stage, 'model'))
        if os.path.isfile(self.model_file + '.dict'):  # (its .dict.opt is written, never read)
            copy_regular(
                self.model_file + '.dict', os.path.join(self.stage, 'model.dict'), 'a dictionary', 'dict_bytes'
            )
        if self.agent == 'empathy/emotion_classifier':
            local = os.path.isdir(os.path.expanduser(self.opt.get('encoder') or ''))
            self._pack_dir(self.model_file + '.hf', 'model.hf', 'encoder' if local else None)
        if self.agent == 'empathy/bert_ranker':
            self._stage_ranker()
        if self.agent == 'empathy/ethreed':
            self.opt['listener_emotions'] = 'none'  # training labels only
        opt = self.clean(self.opt)
        with open(os.path.join(self.stage, 'model.opt'), 'w', encoding='utf-8') as f:
            json.dump(opt, f, indent=4)
            f.write('\n')
        return opt

    def _pack_dir(self, src: str, name: str, option: Optional[str]) -> None:
        if not os.path.isdir(src):
            raise PackagingError(f'{src} is missing: {self.model_file} needs it to load')
        _copy_dir(src, os.path.join(self.stage, name))
        if option:
            self.packed[option] = MODEL_DIR_PREFIX + name

    def _stage_ranker(self) -> None:
        opt = self.opt
        bert = opt.get('bert_model') or ''
        if os.path.isdir(os.path.expanduser(bert)):
            self._pack_dir(os.path.expanduser(bert), 'encoder', 'bert_model')
        pool = self.pool or opt.get('fixed_candidates_path')
        if not pool or not os.path.isfile(pool):
            pool = self._pool_of_interactive_use()
        copy_regular(pool, os.path.join(self.stage, os.path.basename(pool)), 'a candidate pool', 'data_bytes')
        self.packed['fixed_candidates_path'] = MODEL_DIR_PREFIX + os.path.basename(pool)
        stem = os.path.splitext(os.path.basename(pool))[0]
        folder = os.path.dirname(os.path.abspath(self.model_file))
        base = os.path.basename(self.model_file)
        for name in os.listdir(folder):  # encodings (float32 / bf16) and EmoPrepend emotions
            if name.startswith(f'{base}.{stem}.') and '.encs' in name and '.tmp' not in name:
                copy_regular(
                    os.path.join(folder, name),
                    os.path.join(self.stage, 'model' + name[len(base) :]),
                    'candidate encodings',
                    'checkpoint_bytes',
                )
        if opt.get('emo_classifier_file'):
            clf = os.path.expanduser(opt['emo_classifier_file'])
            os.makedirs(os.path.join(self.stage, 'emo_classifier'))
            for suffix, what, cap in (
                ('', 'a checkpoint', 'checkpoint_bytes'),
                ('.opt', 'an options file', 'opt_bytes'),
            ):
                copy_regular(clf + suffix, os.path.join(self.stage, 'emo_classifier', 'model' + suffix), what, cap)
            self._pack_dir(clf + '.hf', os.path.join('emo_classifier', 'model.hf'), None)
            self.packed['emo_classifier_file'] = MODEL_DIR_PREFIX + 'emo_classifier/model'

    def _pool_of_interactive_use(self) -> str:
        """The pool ``parlai interactive -mf MODEL`` answers from: the agent finds or builds it (and
        caches its encodings beside the model, where they are picked up)."""
        from parlai.core.agents import create_agent_from_model_file

        try:
            agent = create_agent_from_model_file(self.model_file, {'interactive_mode': True})
        except ValueError as err:
            raise PackagingError(f'{self.model_file}: no retrieval pool to pack ({err}); or pass --pool FILE') from None
        return agent.fixed_candidates_path

    def clean(self, opt: Dict) -> Dict:
        """The options without paths of this machine; packed files as ``model_dir:`` values."""
        out = {}
        for key, value in opt.items():
            if key in self.packed:
                out[key] = self.packed[key]
            elif key in DROPPED:
                continue
            elif key in ('ed_datapath', 'pool_ed_datapath') and value not in (None, 'sample'):
                self.dropped.append(key)
            elif is_local_path(value) or (isinstance(value, list) and any(map(is_local_path, value))):
                self.dropped.append(key)
            else:
                out[key] = value
        for key, value in self.packed.items():
            out.setdefault(key, value)
        left = [k for k, v in out.items() if is_local_path(v)]
        assert not left, f'paths left in the packaged options: {left}'
        return out


def try_sample(model_file: str, message: str = SAMPLE_MESSAGE) -> Dict:
    """Load the staged model as ``parlai interactive`` does and answer one message."""
    from parlai.core.agents import create_agent_from_model_file

    check_model_trust(model_file)  # the staged .opt is ours; checked as every opened folder is
    agent = create_agent_from_model_file(model_file, {'interactive_mode': True, 'skip_generation': False})
    agent.observe({'text': message, 'episode_done': True})
    reply = agent.act()
    fields = ('text', 'predicted_emotion', 'emotion_polarity', 'predicted_listener_emotion')
    return {'input': message, **{k: reply[k] for k in fields if reply.get(k) is not None}}


def write_archive(folder: str, archive: str) -> str:
    """A reproducible .tar.gz of the folder's contents (sorted, fixed owner and times)."""
    names = []
    for root, dirs, files in os.walk(folder):
        dirs.sort()
        rel = os.path.relpath(root, folder)
        names += [os.path.normpath(os.path.join(rel, n)) for n in sorted(files)]

    def write(raw):
        with (
            gzip.GzipFile(fileobj=raw, mode='wb', mtime=0, filename='') as gz,
            tarfile.open(fileobj=gz, mode='w', format=tarfile.PAX_FORMAT) as tar,
        ):
            for name in names:
                info = tar.gettarinfo(os.path.join(folder, name), arcname=name)
                info.uid = info.gid = 0
                info.uname = info.gname = ''
                info.mtime = 0
                info.mode = 0o644
                with open(os.path.join(folder, name), 'rb') as f:
                    tar.addfile(info, f)

    atomic_write(archive, write)  # a partial archive never stands at its name
    return archive


def package_model(
    model_file: str,
    name: str,
    outdir: str,
    version: str = 'v1',
    pool: Optional[str] = None,
    card_args: Optional[Dict] = None,
) -> Package:
    from parlai_empathy.serving import model_card, model_zoo

    if not model_zoo.NAME_RE.match(name):
        raise PackagingError(f'--name {name!r}: lower-case letters, digits and "_" (it becomes a module name)')
    for needed in (model_file, model_file + '.opt'):
        if not os.path.isfile(needed):
            raise PackagingError(f'{needed} does not exist: -mf must be a trained model file')
    os.makedirs(outdir, exist_ok=True)
    stem = f'{name}-{version}'
    with tempfile.TemporaryDirectory(prefix=f'{stem}.', dir=outdir) as work:
        stage = os.path.join(work, 'model_dir')
        stager = Stager(model_file, stage, pool)
        opt = stager.stage_all()
        sample = try_sample(os.path.join(stage, 'model'))
        parameters = model_card.count_parameters(os.path.join(stage, 'model'))
        card = model_card.render(
            name=name,
            version=version,
            agent=stager.agent,
            opt=opt,
            sample=sample,
            parameters=parameters,
            dropped=stager.dropped,
            **(card_args or {}),
        )
        with open(os.path.join(stage, 'model.card.md'), 'w', encoding='utf-8') as f:
            f.write(card)
        archive = write_archive(stage, os.path.join(outdir, f'{stem}.tar.gz'))
    digest, size = file_checksum(archive), os.path.getsize(archive)
    with open(archive + '.sha256', 'w') as f:
        f.write(f'{digest}  {os.path.basename(archive)}\n')
    card_path = os.path.join(outdir, f'{stem}.card.md')
    with open(card_path, 'w', encoding='utf-8') as f:
        f.write(card)
    fields = {
        'file': os.path.basename(archive),
        'sha256': digest,
        'size': size,
        'card': os.path.basename(card_path),
        'version': version,
        'agent': stager.agent,
    }
    return Package(archive, digest, size, card_path, fields, sample)
