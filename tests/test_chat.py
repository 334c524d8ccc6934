"""``parlai empathy_chat``: the web chat, served by the real command on 127.0.0.1.

A tiny trained MIME answers through the JSON API with its predicted emotion and polarity; a real
headless Chromium holds a three-turn conversation with a tiny trained ETHREED, whose replies show
the speaker emotion it tracks and the one planned for the reply, and saves a screenshot
(``$TMPDIR/parlai_empathy_chat.png``; README's copy is ``docs/chat.png``).
"""
import json
import os
import tempfile
import urllib.error
import urllib.request

from local_server import LocalServer
from parlai_empathy.agents.safety import EMPTY_INPUT_REPLY
from parlai_empathy.data.emotions import ED_EMOTIONS
from test_humaneval_browser import browser  # noqa: F401  (the shared Chromium fixture: skips or fails)
from tiny_models import PARLAI, cached_tiny_model

SCREENSHOT = os.path.join(tempfile.gettempdir(), 'parlai_empathy_chat.png')
TURNS = ['I failed my driving test this morning.', 'I practised for weeks and still messed up the parking.',
         'Thanks, I will try again next month!']


def chat_server(model_file, cwd) -> LocalServer:
    return LocalServer(lambda port: [PARLAI, 'empathy_chat', '-mf', model_file, '--port', port],
                       ready_path='/healthz', cwd=cwd, env=dict(os.environ, HF_HUB_OFFLINE='1'))


def post_json(url, payload, cookie=None):
    request = urllib.request.Request(url, json.dumps(payload).encode('utf-8'),
                                     {'Content-Type': 'application/json', **({'Cookie': cookie} if cookie else {})})
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
        status, reply, _ = post_json(server.url + '/api/chat', {'text': 'and I start on Monday'},
                                     cookie.split(';')[0])
        assert status == 200 and reply['text'].strip()
        # an empty message gets the answer every agent gives it at the prompt, not an error
        for empty in ('', '   '):
            status, reply, _ = post_json(server.url + '/api/chat', {'text': empty})
            assert status == 200 and reply == {'text': EMPTY_INPUT_REPLY}
        status, reply, _ = post_json(server.url + '/api/chat', {'text': 'so happy today'})
        assert status == 200 and reply['text'] != EMPTY_INPUT_REPLY and reply['predicted_emotion'] in ED_EMOTIONS
        status, error, _ = post_json(server.url + '/api/chat', {'text': 7})
        assert status == 400 and '"text"' in error['error']
        status, error, _ = post_json(server.url + '/api/chat', {'text': 'a' * 100_001})
        assert status == 400 and 'too long' in error['error']
        status, error, _ = post_json(server.url + '/api/chat', {'message': 'hi'})
        assert status == 400 and '"text"' in error['error']
        with urllib.request.urlopen(server.url + '/', timeout=3600) as response:
            page = response.read().decode('utf-8')
        # the page names the model, never the server's path to it
        assert '<p class="model" id="model">empathy/mime</p>' in page
        assert os.path.dirname(model_file) not in page and str(tmp_path_factory.getbasetemp()) not in page
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
            WebDriverWait(browser, 3600).until(lambda d: d.find_elements(By.ID, f'reply-{turn}'))
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
