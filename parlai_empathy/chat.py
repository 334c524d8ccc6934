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
  (``parlai_empathy.agents.safety.EMPTY_INPUT_REPLY``); a malformed request (no JSON, no string
  ``"text"``) is refused with 400, a message over ``MAX_MESSAGE_CHARS`` with 400 (413 for a body
  too large to read);
* the page names the model by its agent (and zoo name), never by its path on the server.
"""
import collections
import html
import json
import secrets
import threading
from typing import Dict, List, Optional
from urllib.parse import parse_qs

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response

MAX_MESSAGE_CHARS = 100_000
MAX_BODY_BYTES = 12 * MAX_MESSAGE_CHARS + 1024  # a form-encoded 4-byte character takes 12
MAX_SESSIONS = 64
COOKIE = 'empathy_chat'
REPLY_FIELDS = ('predicted_emotion', 'emotion_polarity', 'predicted_listener_emotion')
SECURITY_HEADERS = {
    'Content-Security-Policy': "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; "
                               "frame-ancestors 'none'; base-uri 'none'",
    'X-Content-Type-Options': 'nosniff',
    'Referrer-Policy': 'no-referrer',
    'Cache-Control': 'no-store',
}
STYLE = """
body{font-family:system-ui,sans-serif;max-width:46rem;margin:2rem auto;padding:0 1rem;color:#222}
h1{font-size:1.4rem;margin-bottom:.2rem}.model{color:#666;margin-top:0}
.turn{padding:.6rem .8rem;border-radius:.6rem;margin:.5rem 0;max-width:85%;overflow-wrap:anywhere}
.user{background:#dbeafe;margin-left:auto}.bot{background:#f1f5f9}
.who{font-weight:600;margin-right:.3rem}
.emotions{display:flex;flex-wrap:wrap;gap:.3rem;margin-top:.4rem}
.emotion{font-size:.8rem;background:#fde68a;border-radius:1rem;padding:.1rem .6rem}
.emotion.tracked{background:#fbcfe8}.emotion.planned{background:#bbf7d0}
form{display:flex;gap:.5rem;margin-top:1rem}input[type=text]{flex:1;padding:.5rem;font-size:1rem}
button{padding:.5rem 1rem;font-size:1rem}.note{color:#92400e}.help{color:#666;font-size:.85rem}
"""
esc = html.escape


def emotion_badges(reply: Dict) -> List[tuple]:
    """(css class, text) of what the reply says about emotions, in display order."""
    badges = []
    tracked = 'predicted_listener_emotion' in reply  # ETHREED tracks the speaker over the turns
    if reply.get('predicted_emotion'):
        label = 'speaker emotion (tracked)' if tracked else 'emotion in your message'
        polarity = f' ({reply["emotion_polarity"]})' if reply.get('emotion_polarity') else ''
        badges.append(('emotion tracked' if tracked else 'emotion',
                       f'{label}: {reply["predicted_emotion"]}{polarity}'))
    if reply.get('predicted_listener_emotion'):
        badges.append(('emotion planned', f'planned for the reply: {reply["predicted_listener_emotion"]}'))
    return badges


def model_title(agent_name: str, model_file: str) -> str:
    """What the page calls the model: its agent, and a zoo model's name; a local file's path
    stays on the server (the page may be shown to other people)."""
    model_file = str(model_file)
    return f'{agent_name} ({model_file})' if model_file.startswith('zoo:') else agent_name


class ChatModel:
    """One loaded model; a copy of its agent (own history, shared weights) per conversation."""

    def __init__(self, agent, title: str):
        from parlai.core.agents import create_agent_from_shared

        self._clone = lambda: create_agent_from_shared(agent.share())
        self.title = title
        self.lock = threading.Lock()  # ParlAI agents are not thread-safe; copies share state
        self.sessions: 'collections.OrderedDict[str, dict]' = collections.OrderedDict()

    @classmethod
    def load(cls, model_file: str, overrides: Optional[Dict] = None) -> 'ChatModel':
        from parlai.core.agents import create_agent_from_model_file

        opts = {'interactive_mode': True, 'skip_generation': False, **(overrides or {})}
        agent = create_agent_from_model_file(model_file, opts)
        return cls(agent, model_title(agent.opt.get('model') or type(agent).__name__, model_file))

    def session(self, token: Optional[str]) -> tuple:
        """(token, conversation) for a cookie value; a new conversation for an unknown one."""
        with self.lock:
            if token in self.sessions:
                self.sessions.move_to_end(token)
                return token, self.sessions[token]
            token = secrets.token_urlsafe(16)
            self.sessions[token] = {'agent': self._clone(), 'turns': []}
            while len(self.sessions) > MAX_SESSIONS:
                self.sessions.popitem(last=False)
            return token, self.sessions[token]

    def say(self, conversation: dict, text: str) -> Dict:
        with self.lock:
            agent = conversation['agent']
            agent.observe({'text': text, 'episode_done': False})
            reply = agent.act()
        out = {'text': str(reply.get('text', ''))}
        out.update({k: reply[k] for k in REPLY_FIELDS if reply.get(k) is not None})
        conversation['turns'].append({'user': text, 'reply': out})
        return out

    def reset(self, token: Optional[str]) -> None:
        with self.lock:
            self.sessions.pop(token, None)


TOO_LONG = f'That message is too long: at most {MAX_MESSAGE_CHARS:,} characters are taken.'


def check_message(text: str) -> Optional[str]:
    """Why a message cannot be sent, or None. An empty one can: the agent answers it."""
    if len(text) > MAX_MESSAGE_CHARS:
        return TOO_LONG
    return None


def render_page(title: str, turns: List[dict], note: str = '') -> str:
    rows = []
    for i, turn in enumerate(turns, 1):
        reply = turn['reply']
        badges = ''.join(f'<span class="{cls}" id="emotion-{i}-{n}">{esc(text)}</span>'
                         for n, (cls, text) in enumerate(emotion_badges(reply), 1))
        rows.append(f'<div class="turn user" id="user-{i}"><span class="who">You:</span>{esc(turn["user"])}</div>'
                    f'<div class="turn bot" id="reply-{i}"><span class="who">Model:</span>'
                    f'<span class="text">{esc(reply["text"])}</span>'
                    + (f'<div class="emotions">{badges}</div>' if badges else '') + '</div>')
    note_html = f'<p class="note" id="note">{esc(note)}</p>' if note else ''
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f'<title>Empathetic chat</title><style>{STYLE}</style></head><body><main>'
        f'<h1>Empathetic chat</h1><p class="model" id="model">{esc(title)}</p>'
        f'<section id="conversation">{"".join(rows)}</section>{note_html}'
        '<form method="post" action="/say" id="chat-form" accept-charset="utf-8">'
        '<input type="text" name="text" id="message" autocomplete="off" autofocus '
        f'maxlength="{MAX_MESSAGE_CHARS}" placeholder="Tell the model how you feel...">'
        '<button type="submit" id="send">Send</button></form>'
        '<form method="post" action="/reset"><button type="submit" id="reset">New conversation</button></form>'
        '<p class="help">The emotions are the model\'s guesses (32 EmpatheticDialogues labels).</p>'
        '</main></body></html>')


def _html(body: str, status: int = 200) -> HTMLResponse:
    return HTMLResponse(body, status_code=status, headers=SECURITY_HEADERS)


async def _read_body(request: Request) -> Optional[bytes]:
    body = b''
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_BODY_BYTES:
            return None
    return body


def make_app(model: ChatModel) -> FastAPI:
    app = FastAPI(title='parlai-empathy chat', docs_url=None, redoc_url=None, openapi_url=None)

    def with_cookie(response: Response, token: str) -> Response:
        response.set_cookie(COOKIE, token, httponly=True, samesite='strict')
        return response

    @app.get('/', response_class=HTMLResponse)
    def page(request: Request):
        token, conversation = model.session(request.cookies.get(COOKIE))
        return with_cookie(_html(render_page(model.title, conversation['turns'])), token)

    @app.post('/say')
    async def say(request: Request):
        token, conversation = model.session(request.cookies.get(COOKIE))
        body = await _read_body(request)
        if body is None:
            return with_cookie(_html(render_page(model.title, conversation['turns'], TOO_LONG), 413), token)
        text = parse_qs(body.decode('utf-8', 'replace'), keep_blank_values=True).get('text', [''])[0]
        problem = check_message(text)
        if problem:
            return with_cookie(_html(render_page(model.title, conversation['turns'], problem), 400), token)
        model.say(conversation, text)
        # Post/Redirect/Get: a reload shows the conversation and never sends the message again
        return with_cookie(RedirectResponse('/', status_code=303, headers=SECURITY_HEADERS), token)

    @app.post('/reset')
    def reset(request: Request):
        model.reset(request.cookies.get(COOKIE))
        return RedirectResponse('/', status_code=303, headers=SECURITY_HEADERS)

    @app.post('/api/chat')
    async def api_chat(request: Request):
        token, conversation = model.session(request.cookies.get(COOKIE))
        body = await _read_body(request)
        if body is None:
            return JSONResponse({'error': TOO_LONG}, status_code=413)
        try:
            text = json.loads(body.decode('utf-8'))['text']
            if not isinstance(text, str):
                raise TypeError('"text" must be a string')
        except (ValueError, KeyError, TypeError) as err:
            return JSONResponse({'error': f'expected {{"text": "..."}} ({err})'}, status_code=400)
        problem = check_message(text)
        if problem:
            return JSONResponse({'error': problem}, status_code=400)
        return with_cookie(JSONResponse(model.say(conversation, text)), token)

    @app.get('/healthz')
    def healthz():
        return Response('ok', media_type='text/plain')

    return app


def serve(model_file: str, host: str = '127.0.0.1', port: int = 8080, overrides: Optional[Dict] = None) -> None:
    import uvicorn

    model = ChatModel.load(model_file, overrides)
    print(f'Chat with {model.title} ({model_file}) on http://{host}:{port}/  (Ctrl-C stops)', flush=True)
    uvicorn.run(make_app(model), host=host, port=port, log_level='warning')
