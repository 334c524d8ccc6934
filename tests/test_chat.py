"""``parlai empathy_chat``: the web chat, served by the real command on 127.0.0.1.

A tiny trained MIME answers through the JSON API with its predicted emotion and polarity; a real
headless Chromium holds a three-turn conversation with a tiny trained ETHREED, whose replies show
the speaker emotion it tracks and the one planned for the reply, and saves a screenshot
(``$TMPDIR/parlai_empathy_chat.png``; README's copy is ``docs/chat.png``).
"""

import collections
import contextlib
import json
import os
import re
import socket
import tempfile
import threading
import time
import urllib.error
import urllib.request

import pytest

from humaneval_helpers import free_port
from local_server import LocalServer
from parlai_empathy.agents.safety import EMPTY_INPUT_REPLY
from parlai_empathy.data.emotions import ED_EMOTIONS
from test_humaneval_browser import browser  # noqa: F401  (the shared Chromium fixture: skips or fails)
from tiny_models import PARLAI, cached_tiny_model

SCREENSHOT = os.path.join(tempfile.gettempdir(), 'parlai_empathy_chat.png')
TURNS = [
    'I failed my driving test this morning.',
    'I practised for weeks and still messed up the parking.',
    'Thanks, I will try again next month!',
]


def chat_server(model_file, cwd) -> LocalServer:
    return LocalServer(
        lambda port: [PARLAI, 'empathy_chat', '-mf', model_file, '--port', port],
        ready_path='/healthz',
        cwd=cwd,
        env=dict(os.environ, HF_HUB_OFFLINE='1'),
    )


def post_json(url, payload, cookie=None):
    request = urllib.request.Request(
        url,
        json.dumps(payload).encode('utf-8'),
        {'Content-Type': 'application/json', **({'Cookie': cookie} if cookie else {})},
    )
    try:
        with urllib.request.urlopen(request, timeout=3600) as response:
            return response.status, json.loads(response.read()), response.headers.get('Set-Cookie')
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read()), None


def listening_addresses(port):
    """Local addresses of the sockets listening on ``port`` (Linux /proc/net/tcp*)."""
    found = []
    for table in ('/proc/net/tcp', '/proc/net/tcp6'):
        if os.path.exists(table):
            with open(table) as f:
                for line in f.readlines()[1:]:
                    local, state = line.split()[1], line.split()[3]
                    address, hex_port = local.split(':')
                    if int(hex_port, 16) == port and state == '0A':  # LISTEN
                        found.append(address)
    return found


def test_api_replies_carry_the_predicted_emotion_on_127_0_0_1(tmp_path_factory, tmp_path):
    model_file = cached_tiny_model(tmp_path_factory, 'mime')
    server = chat_server(model_file, tmp_path)
    try:
        if os.path.exists('/proc/net/tcp'):
            assert listening_addresses(server.port) == ['0100007F'], 'the chat listens on 127.0.0.1 only'
        status, reply, cookie = post_json(server.url + '/api/chat', {'text': 'I got the job I wanted!'})
        assert status == 200 and reply['text'].strip()
        assert reply['predicted_emotion'] in ED_EMOTIONS and reply['emotion_polarity'] in ('positive', 'negative')
        status, reply, _ = post_json(server.url + '/api/chat', {'text': 'and I start on Monday'}, cookie.split(';')[0])
        assert status == 200 and reply['text'].strip()
        # an empty message gets the answer every agent gives it at the prompt, not an error
        for empty in ('', '   '):
            status, reply, _ = post_json(server.url + '/api/chat', {'text': empty})
            assert status == 200 and reply == {'text': EMPTY_INPUT_REPLY}
        status, reply, _ = post_json(server.url + '/api/chat', {'text': 'so happy today'})
        assert status == 200 and reply['text'] != EMPTY_INPUT_REPLY and reply['predicted_emotion'] in ED_EMOTIONS
        status, error, _ = post_json(server.url + '/api/chat', {'text': 7})
        assert status == 400 and '"text"' in error['error']
        status, error, _ = post_json(server.url + '/api/chat', {'text': 'a' * 4_001})
        assert status == 400 and 'too long' in error['error']
        status, error, _ = post_json(server.url + '/api/chat', {'text': 'a' * 100_001})
        assert status == 413 and 'too long' in error['error']  # a body over the limit is not read
        status, error, _ = post_json(server.url + '/api/chat', {'message': 'hi'})
        assert status == 400 and '"text"' in error['error']
        with urllib.request.urlopen(server.url + '/', timeout=3600) as response:
            page = response.read().decode('utf-8')
        # the page names the model, never the server's path to it
        assert '<p class="model" id="model">empathy/mime</p>' in page
        assert os.path.dirname(model_file) not in page and str(tmp_path_factory.getbasetemp()) not in page
    finally:
        server.stop()


def test_moel_replies_show_the_detected_emotion_and_the_listeners_it_weighed(tmp_path_factory, tmp_path):
    server = chat_server(cached_tiny_model(tmp_path_factory, 'moel'), tmp_path)
    try:
        status, reply, cookie = post_json(server.url + '/api/chat', {'text': 'My dog died last night.'})
        assert status == 200 and reply['text'].strip() and reply['predicted_emotion'] in ED_EMOTIONS
        listeners = [part.rsplit(' ', 1) for part in reply['top_listeners'].split(', ')]
        assert listeners and all(name in ED_EMOTIONS and 0 <= float(weight) <= 1 for name, weight in listeners)
        with urllib.request.urlopen(
            urllib.request.Request(server.url + '/', headers={'Cookie': cookie.split(';')[0]}), timeout=3600
        ) as response:
            page = response.read().decode('utf-8')
        assert f'listeners: {reply["top_listeners"]}' in page and 'class="emotion listeners"' in page
    finally:
        server.stop()


def test_browser_three_turn_conversation_with_ethreed(tmp_path_factory, tmp_path, browser):  # noqa: F811
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.wait import WebDriverWait

    if os.path.exists(SCREENSHOT):
        os.remove(SCREENSHOT)
    server = chat_server(cached_tiny_model(tmp_path_factory, 'ethreed'), tmp_path)
    try:
        browser.get(server.url + '/')
        assert 'empathy/ethreed' in browser.find_element(By.ID, 'model').text
        for turn, text in enumerate(TURNS, 1):
            browser.find_element(By.ID, 'message').send_keys(text)
            browser.find_element(By.ID, 'send').click()
            WebDriverWait(browser, 3600).until(lambda d, turn=turn: d.find_elements(By.ID, f'reply-{turn}'))
            assert browser.find_element(By.ID, f'user-{turn}').text.endswith(text)
            reply = browser.find_element(By.ID, f'reply-{turn}')
            assert reply.find_element(By.CLASS_NAME, 'text').text.strip()
            tracked = reply.find_element(By.CSS_SELECTOR, '.emotion.tracked').text
            planned = reply.find_element(By.CSS_SELECTOR, '.emotion.planned').text
            assert tracked.startswith('speaker emotion (tracked): ') and tracked.split(': ', 1)[1] in ED_EMOTIONS
            assert planned.startswith('planned for the reply: ') and planned.split(': ', 1)[1] in ED_EMOTIONS
        browser.refresh()  # the conversation lives on the server: a reload shows all three turns
        assert len(browser.find_elements(By.CSS_SELECTOR, '.turn.bot')) == 3
        browser.save_screenshot(SCREENSHOT)
    finally:
        server.stop()
    assert os.path.getsize(SCREENSHOT) > 10_000


# ----- hostile clients, against the app in a real uvicorn server on 127.0.0.1 ------------------
# (in this process, so that tests can look inside the model; the command above serves the same app)
HANG_GUARD = 600  # seconds: only so that a server that never answers fails the test instead of hanging it
PROMPT = 60  # the same, for requests that must not wait for a model call (none here takes a second)


@pytest.fixture
def chat_model(tmp_path_factory):
    from parlai_empathy.serving.chat import ChatModel

    return ChatModel.load(cached_tiny_model(tmp_path_factory, 'mime'))


@contextlib.contextmanager
def served(model):
    import uvicorn

    from parlai_empathy.serving.chat import make_app

    app = make_app(model)
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host='127.0.0.1', port=port, log_level='warning', lifespan='off'))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        assert thread.is_alive(), 'the chat server did not start'
        time.sleep(0.02)
    try:
        yield app, port
    finally:
        server.should_exit = True
        thread.join(HANG_GUARD)


def raw_http(port, method: bytes, target: bytes, headers=(), body: bytes = b'', chunked=False, guard=HANG_GUARD):
    """One request as the bytes given (nothing checked or encoded on our side); returns the status
    (None when the server closed the connection without answering) and the response's bytes."""
    head = [method + b' ' + target + b' HTTP/1.1', b'Host: 127.0.0.1', b'Connection: close']
    head += list(headers)
    if chunked:
        head.append(b'Transfer-Encoding: chunked')
        payload = (
            b''.join(
                b'%x\r\n' % len(body[i : i + 1024]) + body[i : i + 1024] + b'\r\n' for i in range(0, len(body), 1024)
            )
            + b'0\r\n\r\n'
        )
    else:
        if body or method in (b'POST', b'PUT', b'PATCH'):
            head.append(b'Content-Length: %d' % len(body))
        payload = body
    data = b'\r\n'.join(head) + b'\r\n\r\n' + payload
    response = b''
    with socket.create_connection(('127.0.0.1', port), timeout=guard) as sock:
        try:
            sock.sendall(data)
        except (BrokenPipeError, ConnectionResetError):  # answered (413) before all was sent
            pass
        try:
            while True:
                chunk = sock.recv(65536)
                if not chunk:
                    break
                response += chunk
        except (ConnectionResetError, socket.timeout):
            pass
    match = re.match(rb'HTTP/1\.[01] (\d{3})', response)
    return (int(match.group(1)) if match else None), response


def http_json(port, path, payload: bytes, cookie=None, guard=HANG_GUARD):
    headers = [b'Content-Type: application/json'] + ([b'Cookie: ' + cookie.encode()] if cookie else [])
    status, response = raw_http(port, b'POST', path.encode(), headers, payload, guard=guard)
    return status, response


def cookie_of(response: bytes):
    match = re.search(rb'set-cookie: (empathy_chat=[^;\r\n]+)', response, re.I)
    return match.group(1).decode() if match else None


def page_turns(port, cookie, guard=HANG_GUARD):
    status, response = raw_http(port, b'GET', b'/', [b'Cookie: ' + cookie.encode()], guard=guard)
    assert status == 200
    return re.findall(rb'<div class="turn user" id="user-\d+"><span class="who">You:</span>(.*?)</div>', response)


JSON, FORM = b'Content-Type: application/json', b'Content-Type: application/x-www-form-urlencoded'
HOSTILE_BODIES = [  # (what, headers, body, chunked)
    ('lone surrogate, JSON escape', [JSON], b'{"text": "\\ud800"}', False),
    ('lone low surrogate inside text', [JSON], b'{"text": "a\\udfffb"}', False),
    ('lone surrogate in a key', [JSON], b'{"\\udbff": 1, "text": "hi"}', False),
    ('surrogate pair (an emoji: valid)', [JSON], b'{"text": "\\ud83d\\ude00"}', False),
    ('lone surrogate, percent-encoded in a form', [FORM], b'text=%ED%A0%80', False),
    ('truncated UTF-8 in a form', [FORM], b'text=%F0%9F', False),
    ('invalid UTF-8 byte in JSON', [JSON], b'{"text": "\xff\xfe"}', False),
    ('invalid UTF-8 byte in a form', [FORM], b'text=\xff', False),
    ('byte order mark', [JSON], b'\xef\xbb\xbf{"text": "bom"}', False),
    ('NUL, JSON escape', [JSON], b'{"text": "a\\u0000b"}', False),
    ('raw NUL in a JSON string', [JSON], b'{"text": "a\x00b"}', False),
    ('NUL in a form', [FORM], b'text=a%00b', False),
    ('deep JSON array', [JSON], b'[' * 40_000, False),
    ('deep JSON objects', [JSON], b'{"text":' * 6_000, False),
    ('deep JSON beside text', [JSON], b'{"text": "hi", "x": ' + b'[' * 30_000 + b'}', False),
    ('huge float', [JSON], b'{"text": 1e999999}', False),
    ('huge integer beside text', [JSON], b'{"text": "hi", "n": 1' + b'9' * 10_000 + b'}', False),
    ('NaN', [JSON], b'{"text": NaN}', False),
    ('array', [JSON], b'["text"]', False),
    ('string', [JSON], b'"text"', False),
    ('null', [JSON], b'null', False),
    ('number', [JSON], b'42', False),
    ('empty body', [JSON], b'', False),
    ('text is a number', [JSON], b'{"text": 7}', False),
    ('text is null', [JSON], b'{"text": null}', False),
    ('text is a list', [JSON], b'{"text": ["hi"]}', False),
    ('text is an object', [JSON], b'{"text": {"a": 1}}', False),
    ('repeated JSON field', [JSON], b'{"text": "a", "text": "b"}', False),
    ('repeated form field', [FORM], b'text=a&text=b', False),
    ('form field as array', [FORM], b'text[]=a', False),
    ('form of nothing', [FORM], b'&&&==&%', False),
    ('over the character cap', [JSON], b'{"text": "' + b'x' * 4_001 + b'"}', False),
    ('over the token cap', [JSON], b'{"text": "' + b'sad ' * 300 + b'"}', False),
    ('form over the character cap', [FORM], b'text=' + b'x' * 4_001, False),
    ('JSON sent as a form', [FORM], b'{"text": "hi"}', False),
    ('form sent as JSON', [JSON], b'text=hi', False),
    (
        'multipart',
        [b'Content-Type: multipart/form-data; boundary=x'],
        b'--x\r\nContent-Disposition: form-data; name="text"\r\n\r\nhi\r\n--x--\r\n',
        False,
    ),
    ('odd content type', [b'Content-Type: text/plain; charset=utf-16\xff'], b'{"text": "hi"}', False),
    ('chunked body over the limit', [JSON], b'{"text": "' + b'x' * 60_000 + b'"}', True),
    ('chunked body within the limit', [JSON], b'{"text": "chunked hello"}', True),
]
HOSTILE_FRAMING = [  # (what, headers, body): the headers alone are hostile
    ('declared length too large', [JSON, b'Content-Length: 99999999999999999999'], b'{}'),
    ('declared length not a number', [JSON, b'Content-Length: 12abc'], b'{}'),
    ('two content lengths', [JSON, b'Content-Length: 2', b'Content-Length: 3'], b'{}'),
]
HOSTILE_COOKIES = [
    b'Cookie: empathy_chat=not-a-session',
    b'Cookie: empathy_chat=' + b'A' * 12_000,
    b'Cookie: empathy_chat=\xff\xfe\x80',
    b'Cookie: empathy_chat="quoted\\"value"',
    b'Cookie: ;;;===;empathy_chat;empathy_chat=',
    b'Cookie: empathy_chat=a; empathy_chat=b',
    b'Cookie: ' + b'x=1; ' * 2_000,
]
EXPECTED_AS_USER = {  # what the user's own hostile POSTs get
    (b'/api/chat', 'lone surrogate, JSON escape'): 400,
    (b'/api/chat', 'lone low surrogate inside text'): 400,
    (b'/api/chat', 'surrogate pair (an emoji: valid)'): 200,
    (b'/api/chat', 'invalid UTF-8 byte in JSON'): 400,
    (b'/api/chat', 'NUL, JSON escape'): 200,
    (b'/api/chat', 'deep JSON array'): 400,
    (b'/api/chat', 'deep JSON beside text'): 400,
    (b'/api/chat', 'huge integer beside text'): 400,
    (b'/api/chat', 'repeated JSON field'): 400,
    (b'/api/chat', 'over the token cap'): 400,
    (b'/api/chat', 'chunked body over the limit'): 413,
    (b'/api/chat', 'chunked body within the limit'): 200,
    (b'/say', 'lone surrogate, percent-encoded in a form'): 400,
    (b'/say', 'invalid UTF-8 byte in a form'): 400,
    (b'/say', 'NUL in a form'): 303,
    (b'/say', 'repeated form field'): 400,
    (b'/say', 'form over the character cap'): 400,
}
OTHER_METHODS = [b'GET', b'POST', b'PUT', b'DELETE', b'PATCH', b'OPTIONS', b'TRACE', b'FOO']


def test_hostile_requests_to_every_route_get_no_5xx_and_the_conversation_survives(chat_model):
    statuses = collections.Counter()
    with served(chat_model) as (app, port):
        status, response = http_json(port, '/api/chat', b'{"text": "I lost my keys today."}')
        cookie = cookie_of(response)
        assert status == 200 and cookie
        user = b'Cookie: ' + cookie.encode()
        routes = [route for route in app.routes if getattr(route, 'methods', None)]
        assert {route.path for route in routes} >= {'/', '/say', '/reset', '/api/chat', '/healthz'}
        problems, as_user = [], {}

        def send(what, method, target, headers, body=b'', chunked=False):
            status, response = raw_http(port, method, target, headers, body, chunked)
            statuses[status] += 1
            if user in headers:
                as_user[method, target, what] = status
            if status is None or status >= 500:
                problems.append(f'{method.decode()} {target[:60]!r} {what}: {status} {response[:300]!r}')

        for route in routes:
            path = route.path.encode()
            methods = sorted({m.encode() for m in route.methods} | set(OTHER_METHODS))
            for method in methods:
                # /reset with the user's cookie would end the conversation this test checks
                cookies = [[]] if route.path == '/reset' else [[], [user]]
                for what, headers, body, chunked in HOSTILE_BODIES:
                    for cookie_header in cookies:
                        send(what, method, path, headers + cookie_header, body, chunked)
                for what, headers, body in HOSTILE_FRAMING:
                    send(what, method, path, headers, body)
                for cookie_header in HOSTILE_COOKIES:
                    send('hostile cookie', method, path, [cookie_header, JSON], b'{"text": "hi"}')
            for target in (
                path + b'?text=%ED%A0%80',
                path + b'?' + b'a=' * 3_000,
                path + b'%ff',
                path + b'\xff',
                path + b'/../' * 50,
                path + b'?%',
            ):
                send('hostile target', b'GET', target, cookies[-1])
                send('hostile target', b'POST', target, [FORM] + cookies[-1], b'text=hi')
            send('the page, after the requests to ' + route.path, b'GET', b'/', [user])
        assert not problems, f'{len(problems)} requests got a 5xx or no answer:\n' + '\n'.join(problems[:40])
        for (path, what), expected in EXPECTED_AS_USER.items():
            assert as_user[b'POST', path, what] == expected, (path, what)
        # the user's conversation is still there, renders, and goes on
        turns = page_turns(port, cookie)
        assert turns[0] == b'I lost my keys today.'
        assert all(b'\\ud800' not in t and b'\xed\xa0\x80' not in t for t in turns)
        status, response = http_json(port, '/api/chat', b'{"text": "I found them in the fridge."}', cookie)
        assert status == 200, response[-500:]
        assert page_turns(port, cookie)[-1] == b'I found them in the fridge.'
    assert statuses[400] and statuses[405] and statuses[413], statuses


def test_a_burst_of_new_clients_does_not_drop_a_conversation_in_use(chat_model):
    from parlai_empathy.serving.chat import MAX_SESSIONS_PER_CLIENT

    with served(chat_model) as (_, port):
        status, response = http_json(port, '/api/chat', b'{"text": "My dog is sick."}')
        cookie = cookie_of(response)
        status, _ = http_json(port, '/api/chat', b'{"text": "The vet sees him tomorrow."}', cookie)
        assert status == 200 and cookie
        views, burst = collections.Counter(), collections.Counter()
        for _ in range(500):
            status, response = raw_http(port, b'GET', b'/')
            views[status, cookie_of(response) is not None] += 1
        stored_after_views = len(chat_model.sessions)
        for i in range(200):
            if i % 2:
                status, response = http_json(port, '/api/chat', b'{"text": "hello"}')
            else:
                status, response = raw_http(port, b'POST', b'/say', [FORM], b'text=hello')
            burst[status] += 1
            if status == 429:
                assert b'try again in a few minutes' in response
        assert page_turns(port, cookie) == [b'My dog is sick.', b'The vet sees him tomorrow.']
        assert views == {(200, False): 500} and stored_after_views == 1  # page views store nothing
        # one address holds at most its share, its conversation in use among them
        assert set(burst) <= {200, 303, 429} and burst[200] + burst[303] == MAX_SESSIONS_PER_CLIENT - 1, burst
        assert len(chat_model.sessions) == MAX_SESSIONS_PER_CLIENT
        status, _ = http_json(port, '/api/chat', b'{"text": "Thanks for listening."}', cookie)
        assert status == 200 and len(page_turns(port, cookie)) == 3


def test_squatting_addresses_cannot_keep_new_users_out(chat_model):
    """20 addresses each open conversations as fast as they may and keep them in use; 30 new
    users from other addresses then arrive: every one of them gets a conversation, no squatter
    holds more than its share, and a squatter's burst never takes a new user's place."""
    from parlai_empathy.serving.chat import MAX_SESSIONS, MAX_SESSIONS_PER_CLIENT, ChatModel, Refused

    now = [0.0]
    model = ChatModel(chat_model._agent, chat_model.title, clock=lambda: now[0])
    squatted = collections.Counter()
    for _round in range(2):
        for n in range(20):
            for _ in range(6):
                try:
                    model.say(None, 'hold', client=f'127.0.1.{n + 1}')
                    squatted['served'] += 1
                except Refused as refused:
                    squatted[refused.status] += 1
        now[0] += 1
    held = collections.Counter(c.client for c in model.sessions.values())
    assert len(model.sessions) == MAX_SESSIONS and max(held.values()) <= MAX_SESSIONS_PER_CLIENT
    users = {}
    for i in range(30):
        now[0] += 1  # every squatter conversation stays in use (well within ACTIVE_SECONDS)
        token, reply = model.say(None, 'My dog is sick.', client=f'127.0.2.{i + 1}')
        users[i] = token
        for n in range(20):  # the squatters try again after each newcomer
            try:
                model.say(None, 'hold', client=f'127.0.1.{n + 1}')
            except Refused as refused:
                assert refused.status == 429
    assert all(model.find(token) is not None for token in users.values())
    held = collections.Counter(c.client for c in model.sessions.values())
    print(
        f'squatters: {squatted}; after 30 new users: {len(model.sessions)} conversations, the new users '
        f'holding {sum(held[f"127.0.2.{i + 1}"] for i in range(30))}, the most one squatter holds '
        f'{max(held[f"127.0.1.{n + 1}"] for n in range(20))}'
    )
    assert len(model.sessions) <= MAX_SESSIONS
    assert all(held[f'127.0.2.{i + 1}'] == 1 for i in range(30))
    assert squatted[429] and set(squatted) <= {'served', 429}


def test_the_commands_conversation_caps_say_the_chats_own_defaults():
    from parlai.scripts.empathy_chat import EmpathyChat

    from parlai_empathy.serving.chat import MAX_SESSIONS, MAX_SESSIONS_PER_CLIENT

    text = ' '.join(EmpathyChat.setup_args().format_help().split())
    assert f'history (default: {MAX_SESSIONS})' in text and f'the most (default: {MAX_SESSIONS_PER_CLIENT})' in text


def test_idle_conversations_expire_and_only_idle_ones_make_room(chat_model):
    from parlai_empathy.serving.chat import ACTIVE_SECONDS, IDLE_EXPIRY_SECONDS, ChatModel, Refused

    now = [0.0]
    model = ChatModel(chat_model._agent, chat_model.title, max_sessions=2, clock=lambda: now[0])
    a, _ = model.say(None, 'first')
    now[0] = 100
    b, _ = model.say(None, 'second')
    now[0] = ACTIVE_SECONDS - 1  # both in use: a third is refused, nothing is dropped
    with pytest.raises(Refused) as refused:
        model.say(None, 'third')
    assert refused.value.status == 429 and set(model.sessions) == {a, b}
    now[0] = ACTIVE_SECONDS + 50  # a is idle, b (100 s later) not yet: a makes room
    c, _ = model.say(None, 'third')
    assert set(model.sessions) == {b, c}
    now[0] += IDLE_EXPIRY_SECONDS + 1
    assert model.find(b) is None and model.find(c) is None and not model.sessions


def test_messages_over_the_token_cap_are_refused_before_the_agent_sees_them(chat_model, monkeypatch):
    from parlai_empathy.agents.mime import MimeAgent

    seen = []
    observe = MimeAgent.observe

    def counting_observe(self, observation):
        seen.append(len(self.dict.txt2vec(observation['text'])))
        return observe(self, observation)

    monkeypatch.setattr(MimeAgent, 'observe', counting_observe)
    with served(chat_model) as (_, port):
        status, response = http_json(port, '/api/chat', b'{"text": "' + b'sad ' * 257 + b'"}')
        assert status == 400 and b'at most 256 tokens' in response and b'has 257' in response
        assert not chat_model.sessions  # a refused first message stores nothing
        status, response = http_json(port, '/api/chat', b'{"text": "' + b'sad ' * 256 + b'"}')
        assert status == 200
        cookie = cookie_of(response)
        status, response = http_json(port, '/api/chat', b'{"text": "' + b'so sad ' * 200 + b'"}', cookie)
        assert status == 400 and b'at most 256 tokens' in response
    assert seen and max(seen) <= 256 == chat_model.token_cap  # tiny MIME's --text-truncate


def test_token_cap_follows_the_agents_context_length():
    from parlai_empathy.serving.chat import MAX_MESSAGE_TOKENS, token_cap

    class Agent:
        def __init__(self, **opt):
            self.opt = opt

    assert token_cap(Agent(text_truncate=100)) == 100  # the ranker reads 100 word pieces
    assert token_cap(Agent(text_truncate=1024)) == MAX_MESSAGE_TOKENS
    assert token_cap(Agent(truncate=-1)) == MAX_MESSAGE_TOKENS  # the classifier: no context length
    assert token_cap(Agent(text_truncate=None, truncate=64)) == 64


def test_a_message_being_answered_holds_up_no_page_and_no_other_conversation(chat_model, monkeypatch):
    """The model lock is taken for model calls only, and each conversation has its own lock."""
    from parlai_empathy.agents.mime import MimeAgent

    entered, release = threading.Event(), threading.Event()
    act = MimeAgent.act

    def act_waiting_on_slow(self):
        if self.observation is not None and self.observation.get('text') == 'SLOW':
            entered.set()
            assert release.wait(HANG_GUARD)
        return act(self)

    monkeypatch.setattr(MimeAgent, 'act', act_waiting_on_slow)
    results = {}
    with served(chat_model) as (_, port):
        _, response = http_json(port, '/api/chat', b'{"text": "hello from a"}')
        a = cookie_of(response)
        _, response = http_json(port, '/api/chat', b'{"text": "hello from b"}')
        b = cookie_of(response)
        slow = threading.Thread(
            target=lambda: results.setdefault('a', http_json(port, '/api/chat', b'{"text": "SLOW"}', a))
        )
        slow.start()
        assert entered.wait(HANG_GUARD)  # a's message is in the model, holding the model lock
        try:
            assert page_turns(port, b, PROMPT) == [b'hello from b']
            assert raw_http(port, b'GET', b'/healthz', guard=PROMPT)[0] == 200
            status, response = http_json(port, '/api/chat', b'{"text": "and again"}', a, PROMPT)
            assert status == 429 and b'still answering' in response  # one message per conversation
            # b's message waits for the model lock: for the one call in progress, then runs
            other = threading.Thread(
                target=lambda: results.setdefault('b', http_json(port, '/api/chat', b'{"text": "hi"}', b))
            )
            other.start()
            status, response = http_json(port, '/api/chat', b'{"text": "' + b'x' * 4_001 + b'"}', b, PROMPT)
            assert status == 400  # refused without waiting for the model
        finally:
            release.set()
        slow.join(HANG_GUARD)
        other.join(HANG_GUARD)
    assert results['a'][0] == 200 and results['b'][0] == 200
    assert chat_model.sessions[a.split('=', 1)[1]].lock is not chat_model.sessions[b.split('=', 1)[1]].lock
