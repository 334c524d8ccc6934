"""Read model outputs in ParlAI's own formats, so runs move freely between ParlAI and this task.

* ``eval_model --world-logs FILE.jsonl`` writes one conversation per line (ParlAI's
  ``Conversations`` format): ``{"dialog": [[teacher_msg, model_msg], ...], "context": [...],
  "metadata_path": ...}``. The teacher message carries the speaker's utterance, the gold reply in
  ``eval_labels`` (or ``labels``) and ED's ``emotion``/``situation``; the model message carries
  the reply being judged in ``text``.

  Each context turn is shown once, in order, with the data's roles, whatever the log's shape:
  ParlAI episodes (``--ed-history-length 0``: the teacher's text is the previous utterance and the
  agent keeps the history), or one example per episode whose text is the history joined by
  newlines (``--ed-history-length N``, the MIME/Multi-TR default), with or without our teachers'
  ``context_utterances``/``context_roles`` (which already hold the last Speaker turn). Examples
  where the Speaker responds (``label_role`` speaker, only in train with both sides) are skipped:
  the task rates Listener replies.
* A committed row's ``outputs.jsonl.gz`` (``parlai empathy_leaderboard``'s evidence: one JSON
  object a line with the example ``id`` ``conv_id/turn``, its ``gold`` reply and the model's
  ``reply``), for a row whose model is not at hand. The rows hold no context: each row's
  conversation so far comes from the cleaned ED split the leaderboard evaluated on
  (``empathy_ed_clean``, the same turns and roles its world log would give), and the row's gold
  must be that split's reply, or the file was evaluated on other data.
* ACUTE-Eval pairings JSONL: ``{"is_onboarding", "speakers_to_eval": [m1, m2], "dialogue_ids",
  "dialogue_dicts": [{"speakers", "dialogue": [{"id", "text"}, ...]}, ...]}``.

Every parse error names the file, the line and the field.
"""

import hashlib
import json
import os
from dataclasses import dataclass, field
from typing import Dict, Iterator, List, Optional, Tuple

from parlai_empathy.files.bounded import FileRefused, decode_utf8, iter_gzip_lines, iter_lines, loads_json

SPEAKER = 'speaker'
LISTENER = 'listener'
# the ids of the dataset's turns in the ACUTE-Eval dialogues we write
HUMAN_SPEAKER, HUMAN_LISTENER = 'human_speaker', 'human_listener'


class InputError(ValueError):
    """A malformed input file; the message names file, line and field."""


@dataclass
class Item:
    """One test example: the dialogue so far and the gold listener reply."""

    item_id: str
    emotion: str
    situation: str
    context: List[Tuple[str, str]]  # (role, text), ends with the speaker turn to reply to
    gold: str


@dataclass
class ModelOutputs:
    """One model's replies keyed by item id, plus the items themselves."""

    model: str
    items: Dict[str, Item] = field(default_factory=dict)
    responses: Dict[str, str] = field(default_factory=dict)


def _content_key(situation: str, context: List[Tuple[str, str]], gold: str) -> str:
    """A stable id for teachers (like ParlAI's own ED teacher) whose messages carry no conv_id."""
    blob = json.dumps([situation, context, gold], ensure_ascii=False)
    return 'h' + hashlib.sha1(blob.encode('utf-8')).hexdigest()[:16]


def _first_label(msg: dict) -> Optional[str]:
    for key in ('eval_labels', 'labels'):
        labels = msg.get(key)
        if labels:
            return labels[0] if isinstance(labels, (list, tuple)) else str(labels)
    return None


def _where(path, lineno, what):
    return f'{path}:{lineno}: {what}'


def _alternating_roles(n: int, last: str) -> List[str]:
    """ED's turns alternate: the roles of ``n`` turns, back from the ``last`` one's."""
    other = LISTENER if last == SPEAKER else SPEAKER
    return [last if (n - 1 - i) % 2 == 0 else other for i in range(n)]


def _reply_role(teacher: dict) -> str:
    """Who the gold reply speaks for: the Listener unless our teachers say otherwise."""
    return SPEAKER if teacher.get('label_role') == SPEAKER else LISTENER


def _context(teacher: dict, history: List[Tuple[str, str]], where) -> List[Tuple[str, str]]:
    """The turns before the reply, each once and in order, as (role, text).

    ``context_utterances`` (our teachers) hold the whole context, the teacher's text included.
    Without them the text is new turns after ``history`` (what this episode said so far): one
    utterance in ParlAI's episodes, or several joined by newlines, ParlAI's turn delimiter, in
    flat examples (one per episode) or in teachers that repeat the whole history every turn.
    """
    last = LISTENER if _reply_role(teacher) == SPEAKER else SPEAKER
    utterances = teacher.get('context_utterances')
    if utterances is not None:
        if not (isinstance(utterances, list) and utterances and all(isinstance(u, str) for u in utterances)):
            raise InputError(where("teacher field 'context_utterances' must be a non-empty list of strings"))
        roles = teacher.get('context_roles')
        if roles is None:
            roles = _alternating_roles(len(utterances), last)
        elif not (
            isinstance(roles, list) and len(roles) == len(utterances) and all(r in (SPEAKER, LISTENER) for r in roles)
        ):
            raise InputError(
                where(
                    f"teacher field 'context_roles' must give '{SPEAKER}' or '{LISTENER}' for each of "
                    f"the {len(utterances)} 'context_utterances'"
                )
            )
        # the text is the context's tail (its last turn, or its last turns joined by newlines);
        # if it were not, raters would see a context other than the one the model answered
        if teacher['text'].split('\n')[-1].strip() != utterances[-1].strip():
            raise InputError(where("teacher field 'text' does not end with the last of its 'context_utterances'"))
        return list(zip(roles, utterances))
    lines = teacher['text'].split('\n')
    said = [text for _, text in history]
    if history and len(lines) > len(said) and lines[: len(said)] == said:
        lines = lines[len(said) :]  # the whole history again, then the new turn
    return history + list(zip(_alternating_roles(len(lines), last), lines))


def _item_id(conv_id, turn) -> str:
    """An ED example's item id, ``conv_id#turn``: the same in every model's outputs."""
    return f'{conv_id}#{turn}'


def _no_reply_text(loc: str, reply) -> str:
    """Why a model message has no reply, and the fix when it is the usual cause."""
    if isinstance(reply, dict) and 'text' not in reply:
        model = f' ({reply["id"]})' if isinstance(reply.get('id'), str) else ''
        return (
            f"{loc} model message{model} has no 'text': the log holds no generated replies "
            '(the model ran with skip_generation true, as its saved options may say); rerun '
            'parlai eval_model with --skip-generation false'
        )
    return f"{loc} model message has no string 'text'"


def model_name_from_path(path: str) -> str:
    """``runs/mime_test.jsonl`` -> ``mime_test``."""
    return os.path.splitext(os.path.basename(path))[0]


def _json_lines(path: str, what: str) -> Iterator[Tuple[int, object]]:
    """(line number, value) of each non-blank line of a JSONL file, through the bounded reader
    (a regular file, lines and JSON within their caps); its refusals as :class:`InputError`."""
    try:
        for lineno, raw in iter_lines(path, what, line_cap='log_line_bytes'):
            line = decode_utf8(raw, path, lineno)
            if line.strip():
                yield lineno, loads_json(line, path, lineno, what=f'a line of {what}')
    except FileRefused as err:
        raise _refused(err) from None


def _refused(err: FileRefused) -> InputError:
    """The bounded reader's refusal in this module's own ``file:line:`` form."""
    if err.line_no is None:
        return InputError(str(err))
    field = f'field {err.field!r}: ' if err.field else ''
    return InputError(_where(err.path, err.line_no, field + err.problem))


def read_world_log(path: str, model: Optional[str] = None) -> ModelOutputs:
    """Parse one ``eval_model --world-logs`` JSONL file into items and that model's replies."""
    out = ModelOutputs(model=model or model_name_from_path(path))
    for lineno, convo in _json_lines(path, 'a world log'):
        dialog = convo.get('dialog') if isinstance(convo, dict) else None
        if not isinstance(dialog, list):
            raise InputError(_where(path, lineno, "field 'dialog' missing or not a list"))
        history: List[Tuple[str, str]] = []
        for turn_idx, turn in enumerate(dialog):
            loc = f"'dialog'[{turn_idx}]"
            if not isinstance(turn, list) or len(turn) < 2:
                raise InputError(_where(path, lineno, f'{loc} must be [teacher message, model message]'))
            teacher, reply = turn[0], turn[1]
            if not isinstance(teacher, dict) or not isinstance(teacher.get('text'), str):
                raise InputError(_where(path, lineno, f"{loc} teacher message has no string 'text'"))
            if not isinstance(reply, dict) or not isinstance(reply.get('text'), str):
                raise InputError(_where(path, lineno, _no_reply_text(loc, reply)))
            gold = _first_label(teacher)
            if gold is None:
                raise InputError(_where(path, lineno, f"{loc} teacher message has no 'eval_labels'/'labels'"))
            context = _context(
                teacher, history, lambda what, lineno=lineno, loc=loc: _where(path, lineno, f'{loc} {what}')
            )
            # ParlAI's agents add the gold reply, not their own, to the history they keep
            history = context + [(_reply_role(teacher), gold)]
            if _reply_role(teacher) == SPEAKER:
                continue
            situation = str(teacher.get('situation', ''))
            if teacher.get('conv_id'):
                turn_no = teacher.get('turn', turn_idx)
                item_id = _item_id(teacher['conv_id'], turn_no)
            else:
                item_id = _content_key(situation, context, gold)
            if item_id in out.items:
                raise InputError(_where(path, lineno, f'{loc} repeats item {item_id}'))
            out.items[item_id] = Item(
                item_id=item_id,
                emotion=str(teacher.get('emotion', '')),
                situation=situation,
                context=context,
                gold=gold,
            )
            out.responses[item_id] = reply['text']
    if not out.items:
        raise InputError(f'{path}: no conversations found')
    return out


def ed_items(ed_dir: str, split: str = 'test') -> Dict[str, Item]:
    """Every Listener reply of the cleaned ED ``split`` as an item, keyed as the world logs' are."""
    from parlai_empathy.data import ed_episodes, ed_raw

    conversations, _report = ed_raw.read_clean(os.path.join(ed_dir, f'{split}.csv'))
    items = {}
    for episode in ed_episodes.build_episodes(conversations, both_sides=False):
        for ex in episode:
            item_id = _item_id(ex.conv_id, ex.turn)
            items[item_id] = Item(
                item_id=item_id,
                emotion=ex.emotion,
                situation=ex.situation,
                context=list(zip(ex.context_roles, ex.context_utterances)),
                gold=ex.label,
            )
    return items


def read_outputs(path: str, items: Dict[str, Item], model: Optional[str] = None) -> ModelOutputs:
    """A committed ``outputs.jsonl.gz``'s replies to ``items`` (:func:`ed_items`)."""
    # a row's folder is its name: projects/<paper>/runs/<row>/outputs.jsonl.gz
    out = ModelOutputs(model=model or os.path.basename(os.path.dirname(os.path.abspath(path))))
    by_row_id = {row_id(item_id): item for item_id, item in items.items()}
    try:
        for lineno, line in iter_gzip_lines(path, 'per-example outputs (gzipped JSON lines)'):
            if not line.strip():
                continue
            row = loads_json(decode_utf8(line, path, lineno), path, lineno, what='an outputs row')
            _add_output_row(out, row, by_row_id, lambda what, n=lineno: _where(path, n, what))
    except FileNotFoundError:
        raise InputError(f'{path} does not exist') from None
    except FileRefused as err:
        raise _refused(err) from None
    if not out.items:
        raise InputError(f'{path}: no rows found')
    return out


def row_id(item_id: str) -> str:
    """An item's id (:func:`_item_id`) -> its example's id in ``outputs.jsonl.gz``
    (``conv_id/turn``, :func:`parlai_empathy.evidence.artifacts.example_id`)."""
    conv, _, turn = item_id.rpartition('#')
    return f'{conv}/{turn}'


def _add_output_row(out: ModelOutputs, row, by_row_id: Dict[str, Item], where) -> None:
    if not isinstance(row, dict):
        raise InputError(where('a row must be a JSON object'))
    for key in ('id', 'gold', 'reply'):
        if not isinstance(row.get(key), str):
            raise InputError(where(f"field '{key}' missing or not a string"))
    item = by_row_id.get(row['id'])
    if item is None:
        raise InputError(
            where(
                f"'id' {row['id']!r} is no Listener reply of the cleaned ED split: was the row evaluated on other data?"
            )
        )
    if row['gold'] != item.gold:
        raise InputError(
            where(
                f"'gold' of {row['id']} is not the cleaned ED split's reply "
                f'({item.gold!r}): was the row evaluated on other data?'
            )
        )
    if item.item_id in out.items:
        raise InputError(where(f"repeats 'id' {row['id']}"))
    out.items[item.item_id] = item
    out.responses[item.item_id] = row['reply']


def align(outputs: List[ModelOutputs]) -> Tuple[Dict[str, Item], List[str]]:
    """Items every model answered, and the model names; refuse duplicate names or no overlap."""
    names = [o.model for o in outputs]
    if len(set(names)) != len(names):
        raise InputError(f'model names must be unique, got {names}')
    shared = set(outputs[0].items)
    for o in outputs[1:]:
        shared &= set(o.items)
    if not shared:
        raise InputError('the world logs share no test items; were they produced from the same task and datatype?')
    items = {k: outputs[0].items[k] for k in sorted(shared)}
    return items, names


@dataclass
class Pairing:
    """One ACUTE-Eval pairing: two models' dialogues shown side by side."""

    models: Tuple[str, str]
    dialogues: Tuple[List[dict], List[dict]]  # each: [{'id', 'text'}, ...]
    dialogue_ids: Tuple[str, str]
    is_onboarding: bool = False
    correct_answer: Optional[str] = None


def read_pairings(path: str) -> List[Pairing]:
    """Parse an ACUTE-Eval pairings JSONL file."""
    pairs = []
    for lineno, row in _json_lines(path, 'a pairings file'):
        if not isinstance(row, dict):
            raise InputError(_where(path, lineno, 'not a JSON object of a pairing'))
        speakers = row.get('speakers_to_eval')
        dicts = row.get('dialogue_dicts')
        if not (isinstance(speakers, list) and len(speakers) == 2):
            raise InputError(_where(path, lineno, "'speakers_to_eval' must list 2 models"))
        if not (isinstance(dicts, list) and len(dicts) == 2):
            raise InputError(_where(path, lineno, "'dialogue_dicts' must hold 2 dialogues"))
        dialogues = []
        for i, d in enumerate(dicts):
            turns = d.get('dialogue') if isinstance(d, dict) else None
            if not isinstance(turns, list) or not all(
                isinstance(t, dict) and isinstance(t.get('text'), str) for t in turns
            ):
                raise InputError(
                    _where(path, lineno, f"'dialogue_dicts'[{i}].dialogue must be a list of {{'id', 'text'}}")
                )
            dialogues.append([{'id': str(t.get('id', '')), 'text': t['text']} for t in turns])
        ids = row.get('dialogue_ids') or [f'{lineno}:0', f'{lineno}:1']
        pairs.append(
            Pairing(
                models=(str(speakers[0]), str(speakers[1])),
                dialogues=(dialogues[0], dialogues[1]),
                dialogue_ids=(str(ids[0]), str(ids[1])),
                is_onboarding=bool(row.get('is_onboarding', False)),
                correct_answer=row.get('correct_answer'),
            )
        )
    if not pairs:
        raise InputError(f'{path}: no pairings found')
    return pairs


def acute_dialogue(item: Item, model: str, response: str) -> dict:
    """One item as an ACUTE-Eval dialogue dict; only the final turn is the model's."""
    turns = [{'id': HUMAN_SPEAKER if role == SPEAKER else HUMAN_LISTENER, 'text': text} for role, text in item.context]
    turns.append({'id': model, 'text': response})
    speakers = list(dict.fromkeys(t['id'] for t in turns))
    return {'speakers': speakers, 'dialogue': turns, 'context': []}


def write_pairings(path: str, rows: List[dict]) -> None:
    """Write ACUTE-Eval pairings JSONL (rows already in ACUTE's shape)."""
    with open(path, 'w', encoding='utf-8') as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + '\n')
