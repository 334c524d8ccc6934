"""A web chat with any model of the project: ``parlai empathy_chat -mf MODEL``.

ParlAI's own ``interactive_web`` shows the reply text only (and loads its style sheet from a CDN),
so the page that shows what our models read off the conversation is served here, on the same
FastAPI/uvicorn stack as the human-evaluation pages, bound to 127.0.0.1 by default:

* every reply comes with the emotion the model read in the user's message (``predicted_emotion``;
  MIME and Multi-TR add the polarity they mimic), and for ETHREED the speaker emotion it tracks
  across the turns and the emotion its policy planned for the reply;
* a plain server-rendered form, no script: it works in any browser and after a reload; every
  value shown is escaped (model replies are untrusted text) and a Content-Security-Policy allows
  no script at all;
* each browser gets its own conversation (a cookie), with its own copy of the agent sharing the
  one loaded model; ``POST /api/chat`` ({"text": ...} -> the reply and its fields as JSON) serves
  scripts;
* an empty or blank message gets the answer it gets at ``parlai interactive``: every agent of
  ours replies with one short request to say something, without running the model
  (``parlai_empathy.agents.safety.EMPTY_INPUT_REPLY``);
* the page names the model by its agent (and zoo name), never by its path on the server.

What a client can make the server do is bounded, and no request gets a 5xx for what it sent:

* a conversation is stored only once its browser sends a message (``POST /say`` or
  ``/api/chat``); a page view without a known cookie shows the empty page and stores nothing.
  At most ``MAX_SESSIONS`` are kept, and at most ``MAX_SESSIONS_PER_CLIENT`` of one client
  address: one idle for ``IDLE_EXPIRY_SECONDS`` is dropped; a client at its own cap replaces its
  own least recently used conversation idle for ``ACTIVE_SECONDS`` (else 429); a new one beyond
  the store's cap replaces the least recently used conversation idle that long, else one of the
  address holding the most conversations when that is more than the newcomer's address holds,
  else it is refused with 429. So no burst from one address drops a conversation in use, and
  clients holding many conversations cannot keep a new address out;
* a message is text of at most ``MAX_MESSAGE_CHARS`` characters and at most ``token_cap``
  tokens of the model's own dictionary (its ``--text-truncate``, never over
  ``MAX_MESSAGE_TOKENS``), in a conversation of at most ``MAX_TURNS`` turns; a body is read
  within ``MAX_BODY_BYTES`` (413 past it); a body that is not UTF-8, JSON nested too deeply, a
  lone surrogate, a repeated ``text`` field or no string ``text`` get 400, and nothing of them is
  stored;
* ParlAI agents are not thread-safe and the copies share the model, so model calls take turns on
  one lock (``ChatModel.lock``), held only for counting one capped message's tokens and one model
  call on it; reading bodies, checking them and rendering pages never wait for it, and each
  conversation has its own lock, so one conversation has at most one message in the queue (a
  second at the same time gets 429).
"""

import collections
import json
import secrets
import threading
import time
from typing import Callable, Dict, List, Optional, Tuple
from urllib.parse import parse_qsl

import jinja2
from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.concurrency import run_in_threadpool
from starlette.requests import ClientDisconnect

from parlai_empathy.files.web_limits import BodyTooLarge, MalformedBody, read_body

# a 256-token message of English is about 1,300 characters; the character cap leaves room for
# long words while keeping the tokenizer's work on one message (done under the model lock) small
MAX_MESSAGE_CHARS = 4_000
MAX_MESSAGE_TOKENS = 256  # the context our generators read (--text-truncate 256)
MAX_BODY_BYTES = 12 * MAX_MESSAGE_CHARS + 1024  # a form-encoded 4-byte character takes 12
MAX_TURNS = 100  # bounds a conversation's memory and the history the agent re-reads each turn
MAX_SESSIONS = 64
MAX_SESSIONS_PER_CLIENT = 4  # a household or office behind one address; beyond it, its own oldest make room
ACTIVE_SECONDS = 10 * 60  # a conversation used this recently is never replaced by a new one
IDLE_EXPIRY_SECONDS = 60 * 60
COOKIE = 'empathy_chat'
REPLY_FIELDS = ('predicted_emotion', 'emotion_polarity', 'predicted_listener_emotion', 'top_listeners')
SECURITY_HEADERS = {
    'Content-Security-Policy': "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; "
    "frame-ancestors 'none'; base-uri 'none'",
    'X-Content-Type-Options': 'nosniff',
    'Referrer-Policy': 'no-referrer',
    'Cache-Control': 'no-store',
}
# the page: an autoescaped Jinja2 template, as the rating pages are (every value shown is escaped
# unless the template says otherwise, and it never does); a missing value is an error, not blank
PAGE = jinja2.Environment(
    loader=jinja2.PackageLoader('parlai_empathy.serving', 'templates'),
    autoescape=True,
    undefined=jinja2.StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
).get_template('chat.html')


def emotion_badges(reply: Dict) -> List[tuple]:
    """(css class, text) of what the reply says about emotions, in display order."""
    badges = []
    tracked = 'predicted_listener_emotion' in reply  # ETHREED tracks the speaker over the turns
    if reply.get('predicted_emotion'):
        label = 'speaker emotion (tracked)' if tracked else 'emotion in your message'
        polarity = f' ({reply["emotion_polarity"]})' if reply.get('emotion_polarity') else ''
        badges.append(('emotion tracked' if tracked else 'emotion', f'{label}: {reply["predicted_emotion"]}{polarity}'))
    if reply.get('predicted_listener_emotion'):
        badges.append(('emotion planned', f'planned for the reply: {reply["predicted_listener_emotion"]}'))
    if reply.get('top_listeners'):  # MoEL: the listeners its meta listener weighed for this reply
        badges.append(('emotion listeners', f'listeners: {reply["top_listeners"]}'))
    return badges


def model_title(agent_name: str, model_file: str) -> str:
    """What the page calls the model: its agent, and a zoo model's name; a local file's path
    stays on the server (the page may be shown to other people)."""
    model_file = str(model_file)
    return f'{agent_name} ({model_file})' if model_file.startswith('zoo:') else agent_name


TOO_LONG = f'That message is too long: at most {MAX_MESSAGE_CHARS:,} characters are taken.'
NOT_TEXT = 'That message is not valid text: it holds bytes that are not UTF-8 or a lone surrogate.'
BUSY = 'This conversation is still answering your previous message: send the next one once its reply is shown.'
FULL = f'This conversation has reached {MAX_TURNS} turns, the most one can hold: start a new conversation.'
CLIENT_FULL = (
    f'Your address already holds {{}} conversations, all used in the last {ACTIVE_SECONDS // 60} '
    'minutes: continue one of them, or try again in a few minutes.'
)
STORE_FULL = (
    f'The chat is holding as many conversations as it can ({{}}), all of them used in the '
    f'last {ACTIVE_SECONDS // 60} minutes: please try again in a few minutes.'
)


class Refused(Exception):
    """A request the chat answers with ``status`` and ``message`` instead of a reply."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status, self.message = status, message


def is_text(value: str) -> bool:
    """Whether ``value`` can be encoded as UTF-8 (a lone surrogate cannot, so it could not be
    shown on the page, sent as JSON or tokenized by every agent)."""
    try:
        value.encode('utf-8')
        return True
    except UnicodeEncodeError:
        return False


def shown(value) -> str:
    """A reply field as text that the page and the JSON can always encode."""
    value = str(value)
    return value if is_text(value) else value.encode('utf-8', 'replace').decode('utf-8')


def check_message(text: str) -> Optional[str]:
    """Why a message cannot be sent, or None. An empty one can: the agent answers it."""
    if len(text) > MAX_MESSAGE_CHARS:
        return TOO_LONG
    if not is_text(text):
        return NOT_TEXT
    return None


def token_cap(agent) -> int:
    """The most tokens a message may have: what the model reads of its context (past it the
    model sees nothing more, while tokenizing costs on), never over ``MAX_MESSAGE_TOKENS``."""
    opt = getattr(agent, 'opt', None) or {}
    for key in ('text_truncate', 'truncate'):
        value = opt.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return min(value, MAX_MESSAGE_TOKENS)
    return MAX_MESSAGE_TOKENS


def count_tokens(agent, text: str) -> int:
    """The tokens of ``text`` in the agent's own dictionary (white-space words without one)."""
    dictionary = getattr(agent, 'dict', None)
    if dictionary is None or not hasattr(dictionary, 'txt2vec'):
        return len(text.split())
    return len(dictionary.txt2vec(text))


def too_many_tokens(count: int, cap: int) -> str:
    return (
        f'That message is too long for this model: it reads at most {cap:,} tokens of a message, '
        f'and this one has {count:,}.'
    )


class Conversation:
    """One browser's conversation: its copy of the agent (made at its first message), its turns,
    and a lock held while one of its messages is answered."""

    def __init__(self, now: float, client: Optional[str] = None):
        self.client = client
        self.agent = None
        self.turns: List[dict] = []
        self.lock = threading.Lock()
        self.last_used = now


class ChatModel:
    """One loaded model; a copy of its agent (own history, shared weights) per conversation."""

    def __init__(
        self,
        agent,
        title: str,
        max_sessions: int = MAX_SESSIONS,
        clock: Callable[[], float] = time.monotonic,
        max_sessions_per_client: int = MAX_SESSIONS_PER_CLIENT,
    ):
        from parlai.core.agents import create_agent_from_shared

        self._agent = agent
        self._clone = lambda: create_agent_from_shared(agent.share())
        self.title = title
        self.token_cap = token_cap(agent)
        # ParlAI agents are not thread-safe and the copies share the model, its dictionary and
        # caches: every use of them holds this lock, and nothing else does
        self.lock = threading.Lock()
        self._store_lock = threading.Lock()  # the sessions dict alone; never held for model work
        self.sessions: 'collections.OrderedDict[str, Conversation]' = collections.OrderedDict()
        self.max_sessions = max_sessions
        self.max_sessions_per_client = max_sessions_per_client
        self.clock = clock

    @classmethod
    def load(
        cls, model_file: str, overrides: Optional[Dict] = None, trust: bool = False, datapath: Optional[str] = None
    ) -> 'ChatModel':
        """The model of ``model_file`` (or ``zoo:...``), opened only when its ``.opt`` names one of
        our agents or ``trust`` is given: opening another agent's folder can run code from it
        (:func:`parlai_empathy.integration.safe_loading.check_model_trust`, which raises a ModelFileError)."""
        from parlai.core.agents import create_agent_from_model_file
        from parlai.core.build_data import modelzoo_path

        from parlai_empathy.integration.safe_loading import check_model_trust
        from parlai_empathy.serving.model_zoo import _default_datapath

        # modelzoo_path installs a zoo: model through our checked installer before it is read
        path = modelzoo_path(datapath or _default_datapath(), model_file)
        check_model_trust(path, trust=trust)
        opts = {'interactive_mode': True, 'skip_generation': False, **(overrides or {})}
        agent = create_agent_from_model_file(path, opts)
        return cls(agent, model_title(agent.opt.get('model') or type(agent).__name__, model_file))

    # ----- the conversations ------------------------------------------------------------------
    def _expire(self, now: float) -> None:
        for token in [
            t for t, c in self.sessions.items() if now - c.last_used > IDLE_EXPIRY_SECONDS and not c.lock.locked()
        ]:
            del self.sessions[token]

    def find(self, token) -> Optional[Conversation]:
        """The conversation of a cookie value, or None (nothing is created for an unknown one)."""
        if not isinstance(token, str) or not token:
            return None
        with self._store_lock:
            now = self.clock()
            self._expire(now)
            conversation = self.sessions.get(token)
            if conversation is not None:
                conversation.last_used = now
                self.sessions.move_to_end(token)
            return conversation

    def start(self, client: Optional[str] = None) -> Tuple[str, Conversation]:
        """A new conversation of ``client`` (its address), for a browser's first message; which
        conversation makes room for it, or the 429, is decided as the module docstring says."""
        with self._store_lock:
            now = self.clock()
            self._expire(now)

            def idle(owner=None):  # least recently used first
                return next(
                    (
                        t
                        for t, c in self.sessions.items()
                        if now - c.last_used >= ACTIVE_SECONDS
                        and not c.lock.locked()
                        and (owner is None or c.client == owner)
                    ),
                    None,
                )

            held = collections.Counter(c.client for c in self.sessions.values())
            if client is not None and held[client] >= self.max_sessions_per_client:
                own = idle(client)
                if own is None:
                    raise Refused(429, CLIENT_FULL.format(self.max_sessions_per_client))
                del self.sessions[own]
            elif len(self.sessions) >= self.max_sessions:
                room = idle()
                if room is None:
                    heaviest, most = max(held.items(), key=lambda kv: kv[1], default=(None, 0))
                    if most > held[client] + 1:
                        room = next(
                            (t for t, c in self.sessions.items() if c.client == heaviest and not c.lock.locked()), None
                        )
                if room is None:
                    raise Refused(429, STORE_FULL.format(self.max_sessions))
                del self.sessions[room]
            token = secrets.token_urlsafe(16)
            self.sessions[token] = conversation = Conversation(now, client)
            return token, conversation

    def reset(self, token: Optional[str]) -> None:
        with self._store_lock:
            self.sessions.pop(token, None)

    # ----- the model --------------------------------------------------------------------------
    def _check_tokens(self, text: str) -> None:
        """Under ``self.lock``: refuses a message over the token cap."""
        count = count_tokens(self._agent, text)
        if count > self.token_cap:
            raise Refused(400, too_many_tokens(count, self.token_cap))

    def say(self, token: Optional[str], text: str, client: Optional[str] = None) -> Tuple[str, Dict]:
        """Answers ``text`` (already through :func:`check_message`) in the conversation of cookie
        ``token``, starting one for ``client`` when there is none; returns its token and the
        reply, or raises :class:`Refused`. Blocking: the app runs it in a worker thread."""
        conversation = self.find(token)
        checked = False
        if conversation is None:
            with self.lock:  # a refused first message takes no place in the store
                self._check_tokens(text)
            checked = True
            token, conversation = self.start(client)
        if not conversation.lock.acquire(blocking=False):
            raise Refused(429, BUSY)
        try:
            if len(conversation.turns) >= MAX_TURNS:
                raise Refused(400, FULL)
            with self.lock:
                if not checked:
                    self._check_tokens(text)
                if conversation.agent is None:
                    conversation.agent = self._clone()
                conversation.agent.observe({'text': text, 'episode_done': False})
                reply = conversation.agent.act()
            out = {'text': shown(reply.get('text', ''))}
            out.update({k: shown(reply[k]) for k in REPLY_FIELDS if reply.get(k) is not None})
            conversation.turns.append({'user': text, 'reply': out})
            conversation.last_used = self.clock()
            return token, out
        finally:
            conversation.lock.release()


class BadRequest(Exception):
    """A body the chat cannot read a message from (400)."""


EXPECTED = 'expected {"text": "..."}'


def json_text(body: bytes) -> str:
    """The ``text`` of a JSON body ``{"text": "..."}``."""

    def object_without_repeats(pairs):
        if len({key for key, _ in pairs}) != len(pairs):
            raise BadRequest(f'{EXPECTED} (a field is repeated)')
        return dict(pairs)

    try:
        data = json.loads(body.decode('utf-8'), object_pairs_hook=object_without_repeats)
    except RecursionError:
        raise BadRequest(f'{EXPECTED} (the JSON is nested too deeply)') from None
    except UnicodeDecodeError:
        raise BadRequest(f'{EXPECTED} (the body is not UTF-8)') from None
    except ValueError:  # not JSON, or a number Python will not parse
        raise BadRequest(f'{EXPECTED} (the body is not JSON that can be read)') from None
    if not isinstance(data, dict):
        raise BadRequest(f'{EXPECTED} (the body is not a JSON object)')
    if 'text' not in data:
        raise BadRequest(f'{EXPECTED} (no "text")')
    if not isinstance(data['text'], str):
        raise BadRequest(f'{EXPECTED} ("text" must be a string)')
    return data['text']


def form_text(body: bytes) -> str:
    """The ``text`` field of a form body (empty when it has none: the agent answers that)."""
    try:
        fields = parse_qsl(body.decode('utf-8'), keep_blank_values=True, encoding='utf-8', errors='strict')
    except (UnicodeDecodeError, ValueError):
        raise BadRequest(NOT_TEXT) from None
    texts = [value for key, value in fields if key == 'text']
    if len(texts) > 1:
        raise BadRequest('That form sent more than one message.')
    return texts[0] if texts else ''


def render_page(title: str, turns: List[dict], note: str = '') -> str:
    shown_turns = [
        {'user': turn['user'], 'reply': turn['reply'], 'badges': emotion_badges(turn['reply'])} for turn in turns
    ]
    return PAGE.render(title=title, turns=shown_turns, note=note, max_chars=MAX_MESSAGE_CHARS)


def _html(body: str, status: int = 200) -> HTMLResponse:
    return HTMLResponse(body, status_code=status, headers=SECURITY_HEADERS)


def _json(content: Dict, status: int = 200) -> JSONResponse:
    return JSONResponse(content, status_code=status, headers=SECURITY_HEADERS)


async def read_message(request: Request, parse: Callable[[bytes], str]) -> str:
    """The message a request sends, checked; raises :class:`Refused`."""
    try:
        text = parse(await read_body(request, MAX_BODY_BYTES))
    except BodyTooLarge:
        raise Refused(413, TOO_LONG) from None
    except (MalformedBody, BadRequest) as err:
        raise Refused(400, str(err)) from None
    except ClientDisconnect:  # nobody is left to answer
        raise Refused(400, 'the request ended before its body') from None
    problem = check_message(text)
    if problem:
        raise Refused(400, problem)
    return text


def client_of(request: Request) -> Optional[str]:
    """The client's address as the server sees it (behind a proxy on this machine, uvicorn puts
    the X-Forwarded-For address it trusts here)."""
    return request.client.host if request.client else None


def make_app(model: ChatModel) -> FastAPI:
    app = FastAPI(title='parlai-empathy chat', docs_url=None, redoc_url=None, openapi_url=None)

    def with_cookie(response: Response, token: str) -> Response:
        response.set_cookie(COOKIE, token, httponly=True, samesite='strict')
        return response

    def page_of(request: Request, note: str = '', status: int = 200) -> HTMLResponse:
        conversation = model.find(request.cookies.get(COOKIE))
        turns = list(conversation.turns) if conversation is not None else []
        return _html(render_page(model.title, turns, note), status)

    # the routes are coroutines: bodies are read and pages rendered on the event loop, and only
    # the model call goes to a worker thread, so a request waiting for the model lock never
    # holds up a page view or another request's body
    @app.get('/', response_class=HTMLResponse)
    async def page(request: Request):
        return page_of(request)

    @app.post('/say')
    async def say(request: Request):
        try:
            text = await read_message(request, form_text)
            token, _ = await run_in_threadpool(model.say, request.cookies.get(COOKIE), text, client_of(request))
        except Refused as refused:
            return page_of(request, refused.message, refused.status)
        # Post/Redirect/Get: a reload shows the conversation and never sends the message again
        return with_cookie(RedirectResponse('/', status_code=303, headers=SECURITY_HEADERS), token)

    @app.post('/reset')
    async def reset(request: Request):
        model.reset(request.cookies.get(COOKIE))
        response = RedirectResponse('/', status_code=303, headers=SECURITY_HEADERS)
        response.delete_cookie(COOKIE, httponly=True, samesite='strict')
        return response

    @app.post('/api/chat')
    async def api_chat(request: Request):
        try:
            text = await read_message(request, json_text)
            token, reply = await run_in_threadpool(model.say, request.cookies.get(COOKIE), text, client_of(request))
        except Refused as refused:
            return _json({'error': refused.message}, refused.status)
        return with_cookie(_json(reply), token)

    @app.get('/healthz')
    async def healthz():
        return Response('ok', media_type='text/plain')

    return app


def serve(
    model_file: str,
    host: str = '127.0.0.1',
    port: int = 8080,
    overrides: Optional[Dict] = None,
    trust: bool = False,
    datapath: Optional[str] = None,
    max_conversations: int = MAX_SESSIONS,
    max_conversations_per_client: int = MAX_SESSIONS_PER_CLIENT,
) -> None:
    import uvicorn

    from parlai_empathy.integration.safe_loading import ModelFileError

    try:
        model = ChatModel.load(model_file, overrides, trust=trust, datapath=datapath)
    except ModelFileError as err:
        raise SystemExit(str(err)) from None  # the message alone, as the command's error
    model.max_sessions, model.max_sessions_per_client = max_conversations, max_conversations_per_client
    print(f'Chat with {model.title} ({model_file}) on http://{host}:{port}/  (Ctrl-C stops)', flush=True)
    uvicorn.run(make_app(model), host=host, port=port, log_level='warning')
