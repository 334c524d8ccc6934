"""Who may open what: signed worker links, signed entry links, and the admin credential.

Every link that opens work carries a token signed with the task database's own secret
(HMAC-SHA256 over what the link opens):

* ``w<worker_id>.<sig>`` opens a worker's own page (local pilots, Prolific-style participants);
* ``a<assignment_id>.<sig>`` opens exactly one assignment (an MTurk HIT assignment).

So a link cannot be guessed or forged, cannot be edited to reach another worker or assignment,
and does not carry over from another task (each database has its own secret; rebuilding a task
with ``--overwrite`` makes a new one). Entry points that create workers (``/mturk``, ``/start``)
also require ``entry=<sig>``, a signature of the provider's name that only the researcher can
make, so the public cannot mint workers by calling the server directly.

The admin token travels only in an ``Authorization`` header (``Bearer <token>``, or HTTP Basic
with the token as password, which browsers prompt for), never in a URL, so access logs cannot
record it.
"""

import base64
import binascii
import hashlib
import hmac
import re
import secrets
from typing import Optional, Tuple

from parlai_empathy.humaneval.errors import TaskError

WORKER, ASSIGNMENT = 'w', 'a'
SIG_CHARS = 22  # 16 bytes of HMAC-SHA256 in unpadded base64url
TOKEN_RE = re.compile(r'^([wa])([1-9][0-9]{0,11})\.([A-Za-z0-9_-]{%d})$' % SIG_CHARS)
ADMIN_REALM = 'parlai-empathy admin'


def new_secret() -> str:
    return secrets.token_hex(32)


class LinkSigner:
    """Signs and checks link tokens with one task's secret."""

    def __init__(self, secret_hex: str):
        self._key = bytes.fromhex(secret_hex)

    def _sign(self, message: str) -> str:
        digest = hmac.new(self._key, message.encode('ascii'), hashlib.sha256).digest()
        return base64.urlsafe_b64encode(digest[:16]).decode('ascii').rstrip('=')

    def token(self, kind: str, number: int) -> str:
        if kind not in (WORKER, ASSIGNMENT):
            raise ValueError(f'link kind must be {WORKER!r} or {ASSIGNMENT!r}, got {kind!r}')
        return f'{kind}{number}.{self._sign(f"{kind}{number}")}'

    def verify(self, token: str) -> Tuple[str, int]:
        """(kind, id) of a genuine token; a :class:`TaskError` naming what is wrong otherwise."""
        match = TOKEN_RE.match(token)
        if match is None:
            raise TaskError('malformed worker link (check that it was copied whole)', 404)
        kind, number, sig = match.groups()
        if not hmac.compare_digest(sig, self._sign(f'{kind}{number}')):
            raise TaskError('this link was not issued by this task (bad signature)', 403)
        return kind, int(number)

    def entry(self, provider: str) -> str:
        """The ``entry=`` value that lets a provider's participants in."""
        return self._sign(f'entry:{provider}')

    def check_entry(self, provider: str, given: str) -> None:
        if not given:
            raise TaskError('this entry link lacks its entry= signature; use the link the researcher published', 403)
        # compare_digest needs ASCII; a signature is ASCII, so anything else is simply wrong
        if not given.isascii() or not hmac.compare_digest(given.encode(), self.entry(provider).encode()):
            raise TaskError('this entry link was not issued by this task (bad entry= signature)', 403)


def admin_token_from_header(authorization: str) -> Optional[str]:
    """The token in ``Bearer <token>`` or ``Basic base64(user:<token>)``; None if absent."""
    scheme, _, value = authorization.strip().partition(' ')
    if scheme.lower() == 'bearer':
        return value.strip()
    if scheme.lower() == 'basic':
        try:
            decoded = base64.b64decode(value.strip(), validate=True).decode('utf-8')
        except (binascii.Error, UnicodeDecodeError):
            raise TaskError('malformed Basic credentials', 400) from None
        return decoded.partition(':')[2]
    return None


def check_admin(authorization: str, query_has_token: bool, admin_token: str) -> None:
    if query_has_token:
        raise TaskError(
            'send the admin token in an Authorization header, never in the URL (URLs are written to access logs)', 400
        )
    given = admin_token_from_header(authorization)
    if given is None:
        raise TaskError('admin token required (Authorization: Bearer <token>)', 401)
    if not hmac.compare_digest(given.encode('utf-8', 'surrogatepass'), admin_token.encode()):
        raise TaskError('wrong admin token', 401)
