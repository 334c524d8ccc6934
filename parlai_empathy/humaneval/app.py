"""The worker and admin web pages (FastAPI, served by uvicorn).

Pages are plain server-rendered HTML forms, so they work in any browser, in MTurk's iframe, and
after a reload (the DB, not the browser, knows where a worker is). Every value shown is escaped;
every value received is validated against what this worker was actually given.
"""
import csv
import hmac
import html
import io
import json
import os
import re
from urllib.parse import parse_qs, urlencode, urlparse

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles

from parlai_empathy.humaneval import sampling
from parlai_empathy.humaneval.db import TaskDB, TaskError

STATIC_DIR = os.path.join(os.path.dirname(__file__), 'static')
TOKEN_RE = re.compile(r'^[A-Za-z0-9_-]{8,64}$')
EXTERNAL_ID_RE = re.compile(r'^[A-Za-z0-9_.:@-]{1,128}$')
MTURK_SUBMIT_HOSTS = {'www.mturk.com', 'workersandbox.mturk.com'}
MAX_FORM_BYTES = 4096

# Rashkin et al. (2019), Section 5: the three questions, rated 1 (not at all) .. 5 (very much).
QUESTIONS = {
    'empathy': ('Empathy/Sympathy', 'Did the responses show understanding of the feelings of the '
                'person talking about their experience?'),
    'relevance': ('Relevance', 'Did the responses seem appropriate to the conversation? Were they '
                  'on-topic?'),
    'fluency': ('Fluency', 'Could you understand the responses? Did the language seem accurate?'),
    'overall': ('Overall', 'Which response is better, considering whether it shows understanding '
                'of the feelings of the person, fits the conversation, and is fluent?'),
}
LIKERT_SCALE = {1: '1 (not at all)', 2: '2', 3: '3 (somewhat)', 4: '4', 5: '5 (very much)'}
AB_OPTIONS = {'A': 0, 'B': 1, 'tie': 'tie'}
ROLE_NAMES = {'speaker': 'Speaker', 'listener': 'Listener'}

esc = html.escape


def _page(title: str, body: str, status: int = 200) -> HTMLResponse:
    return HTMLResponse(
        f'<!doctype html><html lang="en"><head><meta charset="utf-8">'
        f'<meta name="viewport" content="width=device-width, initial-scale=1">'
        f'<title>{esc(title)}</title><link rel="stylesheet" href="/static/style.css"></head>'
        f'<body><main>{body}</main></body></html>', status_code=status,
        headers={'Cache-Control': 'no-store'})


def _error(message: str, status: int) -> HTMLResponse:
    return _page('Problem', f'<h1>Sorry</h1><p class="error" id="error">{esc(message)}</p>', status)


def _instructions(cfg: dict) -> str:
    n = cfg['items_per_assignment'] + cfg['checks_per_assignment']
    qs = ''.join(
        f'<li><b>{esc(QUESTIONS[a][0])}:</b> {esc(QUESTIONS[a][1])}</li>' for a in cfg['aspects'])
    if cfg['mode'] == sampling.LIKERT:
        how = ('You will read a short conversation in which a person talks about a personal '
               'experience, followed by a response. Rate the response on each question on a '
               'scale from 1 (not at all) to 3 (somewhat) to 5 (very much).')
    else:
        how = ('You will read a short conversation in which a person talks about a personal '
               'experience, followed by two possible responses, A and B. For each question, pick '
               'the better response, or Tie if neither is better.')
    return (f'<section id="instructions"><h1>Rate responses in conversations</h1><p>{esc(how)}</p>'
            f'<ol class="questions">{qs}</ol><p>There are {n} conversations. Some contain an '
            f'obviously wrong response to check attention. You get a completion code at the '
            f'end.</p></section>')


def _turns(turns) -> str:
    return ''.join(
        f'<div class="turn {esc(role)}"><span class="who">{esc(ROLE_NAMES.get(role, role))}:'
        f'</span> {esc(text)}</div>' for role, text in turns)


def _item_form(cfg: dict, token: str, slot: dict, position: int, total: int) -> str:
    display = slot['display']
    cands = display['candidates']
    if cfg['mode'] == sampling.LIKERT:
        shown = f'<div class="candidate" id="cand-0"><h3>Response</h3>{_turns(cands[0])}</div>'
        fields = ''.join(
            f'<fieldset><legend><b>{esc(QUESTIONS[a][0])}:</b> {esc(QUESTIONS[a][1])}</legend>'
            + ''.join(
                f'<label><input type="radio" name="{a}" value="{v}" required> {esc(label)}</label>'
                for v, label in LIKERT_SCALE.items()) + '</fieldset>'
            for a in cfg['aspects'])
    else:
        shown = ''.join(
            f'<div class="candidate" id="cand-{i}"><h3>Response {"AB"[i]}</h3>{_turns(c)}</div>'
            for i, c in enumerate(cands))
        fields = ''.join(
            f'<fieldset><legend><b>{esc(QUESTIONS[a][0])}:</b> {esc(QUESTIONS[a][1])}</legend>'
            + ''.join(
                f'<label><input type="radio" name="{a}" value="{v}" required> '
                f'{"Tie" if v == "tie" else "Response " + v}</label>' for v in AB_OPTIONS)
            + '</fieldset>' for a in cfg['aspects'])
    return (
        f'<p class="progress" id="progress">Conversation {position} of {total}</p>'
        f'<section class="dialogue"><h2>Conversation</h2>{_turns(display["context"])}</section>'
        f'<section class="candidates">{shown}</section>'
        f'<form method="post" action="/w/{esc(token)}/answer" id="answer-form">'
        f'<input type="hidden" name="slot" value="{slot["slot_id"]}">{fields}'
        f'<button type="submit" id="next">Next</button></form>')


def _validate_answer(cfg: dict, form: dict) -> dict:
    """Exactly the expected fields, each with an allowed value, else a TaskError."""
    expected = {'slot', *cfg['aspects']}
    if set(form) != expected:
        missing, extra = expected - set(form), set(form) - expected
        raise TaskError(f'please answer every question (missing: {sorted(missing)}, '
                        f'unexpected: {sorted(extra)})', 400)
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
    body = await request.body()
    if len(body) > MAX_FORM_BYTES:
        raise TaskError('form too large', 413)
    try:
        parsed = parse_qs(body.decode('utf-8'), keep_blank_values=True, strict_parsing=bool(body))
    except (UnicodeDecodeError, ValueError):
        raise TaskError('malformed form data', 400) from None
    if any(len(v) != 1 for v in parsed.values()):
        raise TaskError('each field must be sent once', 400)
    return {k: v[0] for k, v in parsed.items()}


def create_app(db_path: str) -> FastAPI:
    db = TaskDB(db_path)
    cfg = db.config
    app = FastAPI(title='parlai-empathy human evaluation', docs_url=None, redoc_url=None,
                  openapi_url=None)
    app.state.db = db
    app.mount('/static', StaticFiles(directory=STATIC_DIR), name='static')

    @app.exception_handler(TaskError)
    async def task_error(_request, exc: TaskError):
        return _error(str(exc), exc.status)

    def worker_or_error(token: str) -> dict:
        worker = db.worker_by_token(token) if TOKEN_RE.match(token) else None
        if worker is None:
            raise TaskError('unknown worker link', 404)
        return worker

    def completion_html(assignment: dict) -> str:
        code = esc(assignment['completion_code'])
        out = (f'<h1>Thank you!</h1><p>Your completion code is <b id="completion-code">{code}</b>'
               '</p>')
        if assignment['submit_to']:
            target = assignment['submit_to'] + '/mturk/externalSubmit'
            out += (f'<form method="post" action="{esc(target)}" id="mturk-submit">'
                    f'<input type="hidden" name="assignmentId" '
                    f'value="{esc(assignment["external_ref"].split(":", 1)[1])}">'
                    f'<input type="hidden" name="completionCode" value="{code}">'
                    '<button type="submit">Submit HIT</button></form>')
        elif cfg.get('completion_url'):
            url = cfg['completion_url'].replace('{code}', assignment['completion_code'])
            out += f'<p><a id="completion-link" href="{esc(url)}">Return to the study site</a></p>'
        return out

    @app.get('/', response_class=HTMLResponse)
    def home():
        return _page('Human evaluation', '<h1>Human evaluation</h1><p>Please use the link you '
                     'were given.</p>')

    @app.get('/w/{token}', response_class=HTMLResponse)
    def worker_page(token: str):
        worker = worker_or_error(token)
        assignment = db.open_assignment(worker['worker_id'])
        if assignment is None:
            latest = db.latest_assignment(worker['worker_id'])
            if latest is not None:
                more = '' if latest['submit_to'] else (
                    f'<form method="post" action="/w/{esc(token)}/start"><button type="submit" '
                    'id="another">Do another set</button></form>')
                return _page('Done', completion_html(latest) + more)
        elif assignment['started'] is not None:
            slots = db.slots(assignment['assignment_id'])
            pending = [s for s in slots if not s['answered']]
            return _page('Rate', _item_form(cfg, token, pending[0],
                                            len(slots) - len(pending) + 1, len(slots)))
        return _page('Instructions', _instructions(cfg) + (
            f'<form method="post" action="/w/{esc(token)}/start">'
            '<button type="submit" id="start">Start</button></form>'))

    @app.post('/w/{token}/start')
    def start(token: str):
        worker = worker_or_error(token)
        assignment = db.open_assignment(worker['worker_id'])
        assignment_id = assignment['assignment_id'] if assignment else db.claim(worker['worker_id'])
        if assignment_id is None:
            return _page('No work', '<h1>Thank you</h1><p id="no-work">There is nothing left '
                         'for you to rate.</p>')
        db.start(assignment_id)
        return RedirectResponse(f'/w/{token}', status_code=303)

    @app.post('/w/{token}/answer')
    async def answer(token: str, request: Request):
        worker = worker_or_error(token)
        form = await _read_form(request)
        slot = form.get('slot', '')
        if not slot.isdigit() or len(slot) > 12:
            raise TaskError('missing or malformed item id', 400)
        db.submit(worker['worker_id'], int(slot), _validate_answer(cfg, form))
        return RedirectResponse(f'/w/{token}', status_code=303)

    @app.get('/mturk', response_class=HTMLResponse)
    def mturk(request: Request):
        q = request.query_params
        assignment_ref = q.get('assignmentId', '')
        if not assignment_ref or assignment_ref == 'ASSIGNMENT_ID_NOT_AVAILABLE':
            return _page('Preview', _instructions(cfg) + '<p><b>Accept the HIT to begin.</b></p>')
        worker_ref, submit_to = q.get('workerId', ''), q.get('turkSubmitTo', '')
        parsed = urlparse(submit_to)
        if not (EXTERNAL_ID_RE.match(assignment_ref) and EXTERNAL_ID_RE.match(worker_ref)):
            raise TaskError('malformed MTurk worker or assignment id', 400)
        if parsed.scheme != 'https' or parsed.hostname not in MTURK_SUBMIT_HOSTS:
            raise TaskError('turkSubmitTo must be an mturk.com address', 400)
        worker = db.add_worker('mturk', worker_ref)
        external = f'mturk:{assignment_ref}'
        if db.claim(worker['worker_id'], external, f'https://{parsed.hostname}') is None:
            return _page('No work', '<p id="no-work">Sorry, there is nothing left for you to '
                         'rate. Please return the HIT.</p>')
        return RedirectResponse(f'/w/{worker["token"]}', status_code=303)

    @app.get('/start')
    def generic_start(request: Request):
        """Prolific-style entry: /start?PROLIFIC_PID=... (or worker_id=...)."""
        ref = request.query_params.get('PROLIFIC_PID') or request.query_params.get('worker_id', '')
        if not EXTERNAL_ID_RE.match(ref):
            raise TaskError('missing or malformed participant id', 400)
        worker = db.add_worker('generic', ref)
        return RedirectResponse(f'/w/{worker["token"]}', status_code=303)

    def require_admin(request: Request):
        given = request.query_params.get('token', '')
        auth = request.headers.get('authorization', '')
        if auth.lower().startswith('bearer '):
            given = auth[7:].strip()
        if not hmac.compare_digest(given.encode(), cfg['admin_token'].encode()):
            raise TaskError('admin token required', 401)

    @app.get('/admin', response_class=HTMLResponse)
    def admin(request: Request):
        require_admin(request)
        rows = ''.join(
            f'<tr><td>{esc(p["models"])}</td><td>{p["answered"]}</td><td>{p["wanted"]}</td>'
            f'<td>{100 * p["answered"] / max(p["wanted"], 1):.0f}%</td></tr>'
            for p in db.progress())
        failed = ''.join(
            f'<li>{esc(f["provider"])}:{esc(str(f["external_id"] or f["worker_id"]))} failed '
            f'{f["failed"]} of {f["checks"]} checks</li>' for f in db.failed_workers())
        counts = db.counts()
        return _page('Admin', (
            f'<h1>Progress ({esc(cfg["mode"])})</h1><table id="progress-table"><tr><th>models'
            f'</th><th>answers</th><th>wanted</th><th>done</th></tr>{rows}</table>'
            f'<p>{counts["workers"]} workers, {counts["completed"]}/{counts["assignments"]} '
            f'assignments completed, {counts["answers"]} answers.</p>'
            f'<h2>Failed attention checks</h2><ul id="failed">{failed or "<li>none</li>"}</ul>'
            f'<p><a href="/admin/export.csv?{urlencode({"token": cfg["admin_token"]})}">'
            'Export CSV</a></p>'))

    @app.get('/admin/export.csv')
    def export(request: Request):
        require_admin(request)
        return PlainTextResponse(answers_csv(db), media_type='text/csv', headers={
            'Content-Disposition': 'attachment; filename="answers.csv"'})

    @app.get('/healthz')
    def healthz():
        return Response('ok', media_type='text/plain')

    return app


EXPORT_FIELDS = ['answer_id', 'submitted', 'seconds', 'worker_id', 'provider', 'external_id',
                 'assignment_id', 'completion_code', 'external_ref', 'position', 'unit_id',
                 'item_id', 'emotion', 'is_check', 'check_passed', 'models', 'answer']


def answers_csv(db: TaskDB) -> str:
    """Every answer, one row each, with model names (the admin side is not blind)."""
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=EXPORT_FIELDS, extrasaction='ignore')
    writer.writeheader()
    for row in db.answer_rows():
        row = dict(row, models=json.dumps(row['models']), answer=json.dumps(row['answer']))
        writer.writerow(row)
    return out.getvalue()


def serve(db_path: str, host: str = '127.0.0.1', port: int = 8000) -> None:
    """Run the app with uvicorn (binds to localhost unless told otherwise)."""
    import uvicorn

    uvicorn.run(create_app(db_path), host=host, port=port, log_level='info')
