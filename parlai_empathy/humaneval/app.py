"""The worker and admin web pages (FastAPI, served by uvicorn).

Pages are plain server-rendered HTML forms, so they work in any browser, in MTurk's iframe, and
after a reload (the DB, not the browser, knows where a worker is). Pages are Jinja2 templates
(``templates/``) with autoescaping on for every value, so model replies -- untrusted text -- are
always shown as text; a Content-Security-Policy that allows no script at all backs this up.
Every link that opens work is signed with the task's secret (:mod:`.identity`); every value
received is validated against what this worker was actually given, and anything malformed is
refused with a 4xx naming the field. Bodies are read within a limit while they stream
(:mod:`parlai_empathy.files.web_limits`).

Who a "client" is: the address in ``request.client``, i.e. the TCP peer, or -- when that peer is
a proxy that uvicorn trusts (``forwarded_allow_ips``, uvicorn's default 127.0.0.1 and ::1, so a
reverse proxy or tunnel on this machine) -- the address that proxy names in X-Forwarded-For.
Behind a proxy on another machine, pass its address as ``--forwarded-allow-ips``, otherwise every
participant looks like the proxy and shares one client's caps.
"""

import copy
import csv
import io
import json
import logging
import os
import re
from typing import Optional
from urllib.parse import parse_qs, urlparse

import jinja2
from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from starlette.requests import ClientDisconnect

from parlai_empathy.files import web_limits
from parlai_empathy.humaneval import identity, providers, sampling
from parlai_empathy.humaneval.db import Limits, TaskDB
from parlai_empathy.humaneval.errors import TaskError
from parlai_empathy.humaneval.questions import QUESTIONS

HERE = os.path.dirname(__file__)
STATIC_DIR = os.path.join(HERE, 'static')
TEMPLATES = jinja2.Environment(
    loader=jinja2.FileSystemLoader(os.path.join(HERE, 'templates')),
    autoescape=True,
    undefined=jinja2.StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)
EXTERNAL_ID_RE = re.compile(r'^[A-Za-z0-9][A-Za-z0-9_.:@-]{0,127}$')
MTURK_ID_RE = re.compile(r'^[A-Z0-9]{1,64}$')  # MTurk's worker and assignment ids
MTURK_PREVIEW = 'ASSIGNMENT_ID_NOT_AVAILABLE'
MTURK_SUBMIT_HOSTS = {'www.mturk.com', 'workersandbox.mturk.com'}
MAX_FORM_BYTES = 4096
SLOT_RE = re.compile(r'[1-9][0-9]{0,11}', re.ASCII)
SECURITY_HEADERS = {
    'Cache-Control': 'no-store',
    'X-Content-Type-Options': 'nosniff',
    'Referrer-Policy': 'no-referrer',  # worker links never leak to the completion site
    'Content-Security-Policy': (
        "default-src 'none'; style-src 'self'; img-src 'self'; base-uri 'none'; "
        "form-action 'self' https://www.mturk.com https://workersandbox.mturk.com; "
        "frame-ancestors 'self' https://worker.mturk.com https://workersandbox.mturk.com "
        'https://www.mturk.com'
    ),
}

LIKERT_SCALE = dict(zip(sampling.LIKERT_RATINGS, ['1 (not at all)', '2', '3 (somewhat)', '4', '5 (very much)']))
AB_OPTIONS = {'A': 0, 'B': 1, 'tie': 'tie'}
AB_LABELS = {'A': 'Response A', 'B': 'Response B', 'tie': 'Tie'}
ROLE_NAMES = {'speaker': 'Speaker', 'listener': 'Listener'}
HOW = {
    sampling.LIKERT: 'You will read a short conversation in which a person talks about a personal '
    'experience, followed by a response. Rate the response on each question on a scale from 1 '
    '(not at all) to 3 (somewhat) to 5 (very much).',
    sampling.AB: 'You will read a short conversation in which a person talks about a personal '
    'experience, followed by two possible responses, A and B. For each question, pick the better '
    'response, or Tie if neither is better.',
}


TEMPLATES.globals['role_names'] = ROLE_NAMES


def render(template: str, status: int = 200, **context) -> HTMLResponse:
    html = TEMPLATES.get_template(template).render(**context)
    return HTMLResponse(html, status_code=status, headers=SECURITY_HEADERS)


def message_page(
    title: str, heading: str, message: str, element_id: str, status: int = 200, css_class: str = ''
) -> HTMLResponse:
    return render(
        'message.html',
        status,
        title=title,
        heading=heading,
        message=message,
        element_id=element_id,
        css_class=css_class,
    )


def task_view(cfg: dict) -> dict:
    """What the templates need to know about the task's questions and answer options."""
    likert = cfg['mode'] == sampling.LIKERT
    return {
        'how': HOW[cfg['mode']],
        'questions': [{'aspect': a, 'title': QUESTIONS[a][0], 'text': QUESTIONS[a][1]} for a in cfg['aspects']],
        'per_assignment': cfg['items_per_assignment'] + cfg['checks_per_assignment'],
        'candidate_titles': ['Response'] if likert else [AB_LABELS['A'], AB_LABELS['B']],
        'options': list(LIKERT_SCALE.items()) if likert else list(AB_LABELS.items()),
    }


def _validate_answer(cfg: dict, form: dict) -> dict:
    """Exactly the expected fields, each with an allowed value, else a TaskError."""
    expected = {'slot', *cfg['aspects']}
    if set(form) != expected:
        missing, extra = expected - set(form), set(form) - expected
        raise TaskError(f'please answer every question (missing: {sorted(missing)}, unexpected: {sorted(extra)})', 400)
    if cfg['mode'] == sampling.LIKERT:
        ratings = {}
        for aspect in cfg['aspects']:
            value = form[aspect]
            if value not in {str(v) for v in LIKERT_SCALE}:
                raise TaskError(f'{aspect}: rating must be 1-5, got {value!r}', 400)
            ratings[aspect] = int(value)
        return {'ratings': ratings}
    choices = {}
    for aspect in cfg['aspects']:
        if form[aspect] not in AB_OPTIONS:
            raise TaskError(f'{aspect}: choice must be A, B or tie, got {form[aspect]!r}', 400)
        choices[aspect] = AB_OPTIONS[form[aspect]]
    return {'choices': choices}


async def _read_form(request: Request) -> dict:
    try:
        body = await web_limits.read_body(request, MAX_FORM_BYTES)
    except ClientDisconnect:  # nobody is left to answer; one line in the log, not a traceback
        raise TaskError('the client went away before its form arrived', 400) from None
    except web_limits.BodyTooLarge as err:
        size = f'{err.declared} bytes' if err.declared is not None else 'more than that'
        raise TaskError(f'form too large ({size}; at most {MAX_FORM_BYTES} bytes)', 413) from None
    except web_limits.MalformedBody as err:
        raise TaskError(f'malformed request: {err}', 400) from None
    try:
        parsed = parse_qs(body.decode('utf-8'), keep_blank_values=True, strict_parsing=bool(body))
    except (UnicodeDecodeError, ValueError):
        raise TaskError('malformed form data', 400) from None
    if any(len(v) != 1 for v in parsed.values()):
        raise TaskError('each field must be sent once', 400)
    return {k: v[0] for k, v in parsed.items()}


def _required_id(params, name: str, pattern: re.Pattern, what: str) -> str:
    values = params.getlist(name) if hasattr(params, 'getlist') else [params.get(name, '')]
    if len(values) > 1:
        raise TaskError(f'{name} is sent more than once ({what})', 400)
    value = values[0] if values else ''
    if not value:
        raise TaskError(f'{name} is missing ({what})', 400)
    if not pattern.fullmatch(value):
        raise TaskError(f'{name} is malformed ({what})', 400)
    return value


def _single(params, name: str) -> str:
    values = params.getlist(name)
    if len(values) > 1:
        raise TaskError(f'{name} is sent more than once', 400)
    return values[0] if values else ''


def verify_hit(client, query, assignment_ref: str, worker_ref: str) -> None:
    """Ask MTurk about an accepted HIT before opening work for it.

    MTurk's GetAssignment answers only for submitted, approved or rejected assignments, so an
    assignment just accepted cannot be looked up yet: what can be checked now is that the HIT
    is one of this requester's (GetHIT) and, where MTurk already knows the assignment, that it
    belongs to this HIT and worker. The assignment itself is verified at analysis."""
    hit_ref = _required_id(query, 'hitId', MTURK_ID_RE, 'sent by MTurk with assignmentId')
    errors = providers.mturk_client_errors()
    try:
        client.get_hit(HITId=hit_ref)
    except errors as err:
        raise TaskError(
            f"MTurk does not know HIT {hit_ref} of this task's requester ({providers.mturk_error_code(err)})", 403
        ) from None
    except Exception as err:  # network, credentials: not the worker's fault, nothing stored
        raise TaskError(
            f'could not check this HIT with MTurk ({type(err).__name__}); please try again in a minute', 503
        ) from None
    try:
        found = client.get_assignment(AssignmentId=assignment_ref).get('Assignment', {})
    except Exception:
        return  # the usual case: an accepted assignment is not visible before submission
    if found.get('WorkerId') != worker_ref or found.get('HITId', hit_ref) != hit_ref:
        raise TaskError('this assignmentId does not belong to this workerId and hitId according to MTurk', 403)


def client_address(request: Request) -> Optional[str]:
    """The client's address as the server sees it (see the module docstring)."""
    return request.client.host if request.client else None


def default_limits(db: TaskDB) -> Limits:
    """The task's lease, and no cap per entry link: every participant of a study arrives through
    the one link, so such a cap turns the honest away once enough of them work at once. What one
    client can hold is bounded per address, and holds without answers give way to newcomers
    (:mod:`.db`)."""
    return Limits(lease_seconds=float(db.config['lease_seconds']), open_per_entry=None)


def create_app(db_path: str, limits: Optional[Limits] = None, mturk_api=None) -> FastAPI:
    """The app for one task. ``limits``: leases and reservation caps (default
    :func:`default_limits`). ``mturk_api``: a boto3 MTurk client (or an object with its
    ``get_hit``/``get_assignment``) that checks each accepted HIT at ``/mturk``; without it
    MTurk answers wait for verification at analysis."""
    db = TaskDB(db_path)
    cfg = db.config
    limits = limits or default_limits(db)
    task = task_view(cfg)
    app = FastAPI(title='parlai-empathy human evaluation', docs_url=None, redoc_url=None, openapi_url=None)
    app.state.db = db
    app.state.limits = limits
    app.mount('/static', StaticFiles(directory=STATIC_DIR), name='static')

    @app.exception_handler(TaskError)
    async def task_error(_request, exc: TaskError):
        page = message_page('Problem', 'Sorry', str(exc), 'error', exc.status, css_class='error')
        if exc.status == 401:
            page.headers['WWW-Authenticate'] = f'Basic realm="{identity.ADMIN_REALM}"'
        return page

    def resolve(token: str):
        """(worker, assignment or None, fixed): a worker link serves the worker's open
        assignment; an assignment link (``fixed``) serves only its own assignment."""
        kind, number = db.links.verify(token)
        if kind == identity.WORKER:
            worker = db.worker(number)
            if worker is None:
                raise TaskError('unknown worker link', 404)
            return worker, db.open_assignment(number), False
        assignment = db.assignment(number)
        if assignment is None:
            raise TaskError('unknown assignment link', 404)
        return db.worker(assignment['worker_id']), assignment, True

    def done_page(assignment: dict, link: str, another: bool) -> HTMLResponse:
        code = assignment['completion_code']
        mturk_submit = completion_url = None
        if assignment['submit_to']:
            mturk_submit = {
                'action': assignment['submit_to'] + '/mturk/externalSubmit',
                'assignment_id': assignment['external_ref'].split(':', 1)[1],
            }
        elif cfg.get('completion_url'):
            completion_url = cfg['completion_url'].replace('{code}', code)
        return render(
            'done.html',
            title='Done',
            code=code,
            mturk_submit=mturk_submit,
            completion_url=completion_url,
            another=another,
            link=link,
        )

    def start_page(link: str, can_leave: bool = False) -> HTMLResponse:
        return render('start.html', title='Instructions', task=task, link=link, can_leave=can_leave)

    def left_page(assignment: dict) -> HTMLResponse:
        mturk_hint = ' Please return the HIT on MTurk.' if assignment['submit_to'] else ''
        why = {
            'left': 'You left this task.',
            'preempted': 'This task went to another participant: none of its items had been answered yet.',
        }.get(assignment['release_reason'], 'This task was released after a long idle spell.')
        return message_page(
            'Task returned',
            'Task returned',
            f'{why} Its remaining items went back to other workers; your answers are kept.{mturk_hint}',
            'left',
        )

    def no_work() -> HTMLResponse:
        return message_page('No work', 'Thank you', 'There is nothing left for you to rate.', 'no-work')

    @app.get('/', response_class=HTMLResponse)
    def home():
        return message_page('Human evaluation', 'Human evaluation', 'Please use the link you were given.', 'home')

    @app.get('/w/{token}', response_class=HTMLResponse)
    def worker_page(token: str):
        worker, assignment, fixed = resolve(token)
        link = f'/w/{token}'
        if assignment is not None:
            assignment = db.touch(assignment['assignment_id'], limits)  # a view renews the lease
        if assignment is not None and assignment['released'] is not None and fixed:
            return left_page(assignment)
        if assignment is not None and assignment['completed'] is None and assignment['released'] is None:
            if assignment['started'] is None:
                return start_page(link, can_leave=True)
            slots = db.slots(assignment['assignment_id'])
            pending = [s for s in slots if not s['answered']]
            return render(
                'item.html',
                title='Rate',
                task=task,
                link=link,
                slot_id=pending[0]['slot_id'],
                display=pending[0]['display'],
                position=len(slots) - len(pending) + 1,
                total=len(slots),
            )
        if fixed:
            return done_page(assignment, link, another=False)
        latest = db.latest_assignment(worker['worker_id'])
        if latest is None or latest['completed'] is None:
            return start_page(link)
        return done_page(latest, link, another=not latest['submit_to'])

    @app.post('/w/{token}/start')
    def start(token: str, request: Request):
        worker, assignment, fixed = resolve(token)
        if fixed:
            if assignment['released'] is not None:
                return left_page(assignment)
            assignment_id = assignment['assignment_id']
        else:  # the worker's open assignment, or a new one, in one transaction
            assignment_id = db.claim(
                worker['worker_id'],
                client=client_address(request),
                limits=limits,
                entry=worker['provider'] if worker['provider'] != 'local' else None,
            )
        if assignment_id is None:
            return no_work()
        db.start(assignment_id, limits)
        return RedirectResponse(f'/w/{token}', status_code=303)

    @app.post('/w/{token}/leave')
    def leave(token: str):
        """The worker gives the task back: its unanswered items return to the pool now."""
        _worker, assignment, _fixed = resolve(token)
        if assignment is None:
            return message_page('Nothing to leave', 'Nothing to leave', 'You hold no unfinished task.', 'left')
        db.leave(assignment['assignment_id'])
        return left_page(db.assignment(assignment['assignment_id']))

    @app.post('/w/{token}/answer')
    async def answer(token: str, request: Request):
        worker, assignment, fixed = resolve(token)
        form = await _read_form(request)
        slot = form.get('slot', '')
        if not SLOT_RE.fullmatch(slot):  # ASCII digits only: int() also reads '５' and '١'
            raise TaskError(f'slot: missing or malformed item id {slot[:20]!r}', 400)
        db.submit(
            worker['worker_id'],
            int(slot),
            _validate_answer(cfg, form),
            assignment['assignment_id'] if fixed else None,
            limits,
        )
        return RedirectResponse(f'/w/{token}', status_code=303)

    @app.get('/mturk', response_class=HTMLResponse)
    def mturk(request: Request):
        """MTurk's ExternalQuestion: it appends assignmentId, hitId, workerId and turkSubmitTo.

        A preview (assignmentId ASSIGNMENT_ID_NOT_AVAILABLE) shows the task and writes nothing.
        An accepted HIT binds its assignmentId to the workerId that first brings it; the same
        assignmentId with any other workerId is refused."""
        q = request.query_params
        db.links.check_entry('mturk', _single(q, 'entry'))
        if q.get('assignmentId') == MTURK_PREVIEW:
            return render('preview.html', title='Preview', task=task, example=db.example_display())
        assignment_ref = _required_id(q, 'assignmentId', MTURK_ID_RE, 'sent by MTurk with workerId')
        worker_ref = _required_id(q, 'workerId', MTURK_ID_RE, 'sent by MTurk with assignmentId')
        parsed = urlparse(q.get('turkSubmitTo', ''))
        if parsed.scheme != 'https' or parsed.hostname not in MTURK_SUBMIT_HOSTS:
            raise TaskError(
                'turkSubmitTo must be an https://www.mturk.com or https://workersandbox.mturk.com address', 400
            )
        if mturk_api is not None:
            verify_hit(mturk_api, q, assignment_ref, worker_ref)
        worker = db.add_worker('mturk', worker_ref, client=client_address(request), limits=limits)
        assignment_id = db.claim(
            worker['worker_id'],
            f'mturk:{assignment_ref}',
            f'https://{parsed.hostname}',
            client=client_address(request),
            entry='mturk',
            limits=limits,
        )
        if assignment_id is None:
            return message_page(
                'No work',
                'Thank you',
                'Sorry, there is nothing left for you to rate. Please return the HIT.',
                'no-work',
            )
        return RedirectResponse(f'/w/{db.assignment_token(assignment_id)}', status_code=303)

    @app.get('/start')
    def generic_start(request: Request):
        """Entry through a participant platform; the binding is what the platform sends.

        Prolific: ``PROLIFIC_PID`` with ``STUDY_ID`` and ``SESSION_ID``; another platform:
        ``worker_id`` with ``SESSION_ID``. A participant id without its session id is refused.
        The same binding comes back to the same worker; the same id with another session is a
        worker of its own (it does not get the first one's link, nor lock the first one out);
        :mod:`.analysis` decides which binding of an id counts."""
        q = request.query_params
        db.links.check_entry('generic', _single(q, 'entry'))
        if 'PROLIFIC_PID' in q:
            ref = _required_id(q, 'PROLIFIC_PID', EXTERNAL_ID_RE, 'the participant id')
            study = _required_id(q, 'STUDY_ID', EXTERNAL_ID_RE, 'the study id Prolific sends with PROLIFIC_PID')
        elif 'worker_id' in q:
            ref = _required_id(q, 'worker_id', EXTERNAL_ID_RE, 'the participant id')
            study = None
        else:
            raise TaskError(
                'PROLIFIC_PID is missing (the participant id, sent by the platform with STUDY_ID and SESSION_ID)', 400
            )
        session = _required_id(
            q, 'SESSION_ID', EXTERNAL_ID_RE, 'the session id the platform sends with the participant id'
        )
        worker = db.add_worker('generic', ref, session, study, client_address(request), limits)
        return RedirectResponse(f'/w/{worker["token"]}', status_code=303)

    def require_admin(request: Request):
        identity.check_admin(
            request.headers.get('authorization', ''), 'token' in request.query_params, cfg['admin_token']
        )

    @app.get('/admin', response_class=HTMLResponse)
    def admin(request: Request):
        require_admin(request)
        return render(
            'admin.html',
            title='Admin',
            mode=cfg['mode'],
            progress=db.progress(),
            counts=db.counts(),
            failed=db.failed_workers(),
        )

    @app.get('/admin/export.csv')
    def export(request: Request):
        require_admin(request)
        return PlainTextResponse(
            answers_csv(db),
            media_type='text/csv',
            headers=dict(SECURITY_HEADERS, **{'Content-Disposition': 'attachment; filename="answers.csv"'}),
        )

    @app.get('/healthz')
    def healthz():
        return Response('ok', media_type='text/plain')

    return app


EXPORT_FIELDS = [
    'answer_id',
    'submitted',
    'seconds',
    'worker_id',
    'provider',
    'external_id',
    'study_ref',
    'session_ref',
    'assignment_id',
    'completion_code',
    'external_ref',
    'position',
    'unit_id',
    'item_id',
    'emotion',
    'is_check',
    'check_passed',
    'models',
    'answer',
]


def answers_csv(db: TaskDB) -> str:
    """Every answer, one row each, with model names (the admin side is not blind)."""
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=EXPORT_FIELDS, extrasaction='ignore')
    writer.writeheader()
    for row in db.answer_rows():
        row = dict(row, models=json.dumps(row['models']), answer=json.dumps(row['answer']))
        writer.writerow(row)
    return out.getvalue()


def redact_path(path: str) -> str:
    """A request path as the access log may show it: a link keeps its kind and id but not its
    signature, and the query string (MTurk/Prolific ids, entry signatures) is dropped."""
    path, query_sep, _query = path.partition('?')
    path = re.sub(r'/w/([wa][0-9]{1,12})?[^/]*', lambda m: f'/w/{m.group(1) or ""}.<redacted>', path)
    return path + ('?<redacted>' if query_sep else '')


class RedactLinks(logging.Filter):
    """Keeps signed links and query strings out of uvicorn's access log."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, tuple) and len(args) >= 3 and isinstance(args[2], str):
            record.args = args[:2] + (redact_path(args[2]),) + args[3:]
        return True


def serve(
    db_path: str,
    host: str = '127.0.0.1',
    port: int = 8000,
    log_level: Optional[str] = 'info',
    limits: Optional[Limits] = None,
    mturk=None,
    forwarded_allow_ips: Optional[str] = None,
) -> None:
    """Run the app with uvicorn (binds to localhost unless told otherwise).

    ``forwarded_allow_ips``: the proxies whose X-Forwarded-For names the client (uvicorn's
    default when None: 127.0.0.1 and ::1)."""
    import uvicorn
    from uvicorn.config import LOGGING_CONFIG

    log_config = copy.deepcopy(LOGGING_CONFIG)
    log_config.setdefault('filters', {})['redact_links'] = {'()': RedactLinks}
    log_config['handlers']['access']['filters'] = ['redact_links']
    uvicorn.run(
        create_app(db_path, limits, mturk_api=mturk),
        host=host,
        port=port,
        log_level=log_level,
        log_config=log_config,
        proxy_headers=True,
        forwarded_allow_ips=forwarded_allow_ips,
    )
