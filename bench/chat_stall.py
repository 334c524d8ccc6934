"""How long one user's short message takes at the web chat while another user's longest accepted
message is being answered: the chat served by uvicorn on 127.0.0.1, in its own process.

    python bench/chat_stall.py MODEL_FILE [--style words|sentences] [--long-chars N] [--repeats 5]

The long message is the largest the server accepts (``MAX_MESSAGE_CHARS`` characters, under the
token cap when there is one); the short one is sent 50 ms after it. Prints the median and the
worst time of the short message alone and beside the long one, and the long one's own time.
"""

import argparse
import json
import os
import random
import statistics
import string
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

SERVER = 'import sys; from parlai_empathy.serving.chat import serve; serve(sys.argv[1], port=int(sys.argv[2]))'


def post(url, text, cookie=None):
    request = urllib.request.Request(
        url + '/api/chat',
        json.dumps({'text': text}).encode(),
        {'Content-Type': 'application/json', **({'Cookie': cookie} if cookie else {})},
    )
    start = time.perf_counter()
    try:
        with urllib.request.urlopen(request, timeout=600) as response:
            status, set_cookie = response.status, response.headers.get('Set-Cookie')
            response.read()
    except urllib.error.HTTPError as err:
        status, set_cookie = err.code, None
    return status, time.perf_counter() - start, (set_cookie or '').split(';')[0] or cookie


def long_message(chars: int, rng: random.Random, style: str) -> str:
    """Fresh words (no tokenizer cache has seen them). ``words``: 15 letters each, as many
    characters as the cap allows for few tokens (4,000 characters are 250 words); ``sentences``:
    short words in sentences of eight, the most tokenizer work per character."""
    parts, size = [], 0
    while size < chars:
        if style == 'words':
            part = ''.join(rng.choice(string.ascii_lowercase) for _ in range(15))
        else:
            part = (
                ' '.join(
                    ''.join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(2, 7))) for _ in range(8)
                ).capitalize()
                + ','[: rng.random() < 0.3]
                + '.'
            )
        parts.append(part)
        size += len(part) + 1
    return ' '.join(parts)[:chars]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('model_file')
    parser.add_argument('--long-chars', type=int, default=None, help="default: the chat module's MAX_MESSAGE_CHARS")
    parser.add_argument('--style', choices=('words', 'sentences'), default='words')
    parser.add_argument('--repeats', type=int, default=5)
    parser.add_argument('--port', type=int, default=8391)
    args = parser.parse_args()
    if args.long_chars is None:
        from parlai_empathy.serving.chat import MAX_MESSAGE_CHARS

        args.long_chars = MAX_MESSAGE_CHARS
    url = f'http://127.0.0.1:{args.port}'
    proc = subprocess.Popen(
        [sys.executable, '-c', SERVER, args.model_file, str(args.port)],
        env=dict(os.environ, HF_HUB_OFFLINE='1'),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        for _ in range(1200):
            try:
                urllib.request.urlopen(url + '/healthz', timeout=5).read()
                break
            except OSError:
                time.sleep(0.25)
        _, _, victim = post(url, 'hello')
        _, _, attacker = post(url, 'hello')
        rng = random.Random(0)
        alone, beside, long_times, long_statuses = [], [], [], set()
        for _ in range(args.repeats):
            alone.append(post(url, 'I miss my friends.', victim)[1])
            result, text = {}, long_message(args.long_chars, rng, args.style)
            thread = threading.Thread(
                target=lambda result=result, text=text: result.setdefault('long', post(url, text, attacker))
            )
            thread.start()
            time.sleep(0.05)
            beside.append(post(url, 'I miss my friends.', victim)[1])
            thread.join()
            long_statuses.add(result['long'][0])
            long_times.append(result['long'][1])
        print(
            f'long message: {args.long_chars:,} characters of {args.style}, status {sorted(long_statuses)}, '
            f'{statistics.median(long_times):.3f} s median'
        )
        print(f'short message alone:            median {statistics.median(alone):.3f} s, worst {max(alone):.3f} s')
        print(f'short message beside the long:  median {statistics.median(beside):.3f} s, worst {max(beside):.3f} s')
    finally:
        proc.kill()
        proc.wait()


if __name__ == '__main__':
    main()
