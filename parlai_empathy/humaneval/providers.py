"""Where workers come from: local links, Amazon Mechanical Turk, or a Prolific-style platform.

* local: one private, signed link per worker (``/w/<token>``), for pilots with colleagues;
* MTurk: ExternalQuestion HITs pointing at ``<public https URL>/mturk?entry=<signature>``; MTurk
  appends assignmentId/hitId/workerId/turkSubmitTo, each accepted assignment gets its own signed
  link, and the completion page posts back to MTurk. boto3 finds credentials through its usual
  chain (env vars, ~/.aws, instance role); ``dry_run`` prints the requests instead of sending them;
* generic: participants enter at
  ``<URL>/start?entry=<signature>&PROLIFIC_PID={{%PROLIFIC_PID%}}&STUDY_ID={{%STUDY_ID%}}&SESSION_ID={{%SESSION_ID%}}``
  and finish at the study's completion URL (``{code}`` in it is replaced by their completion code).

The ``entry`` signatures come from the task database's secret (see :mod:`.identity`).
"""

import json
import math
import time
from typing import Callable, Dict, List, Optional
from xml.sax.saxutils import escape as xml_escape

from parlai_empathy.humaneval.db import TaskDB

MTURK_ENDPOINTS = {
    'sandbox': 'https://mturk-requester-sandbox.us-east-1.amazonaws.com',
    'live': 'https://mturk-requester.us-east-1.amazonaws.com',
}
MTURK_WORKER_SITES = {
    'sandbox': 'https://workersandbox.mturk.com/mturk/preview?groupId=',
    'live': 'https://worker.mturk.com/mturk/preview?groupId=',
}
EXTERNAL_QUESTION_SCHEMA = (
    'http://mechanicalturk.amazonaws.com/AWSMechanicalTurkDataSchemas/2006-07-14/ExternalQuestion.xsd'
)
# Built-in MTurk qualification type ids.
QUAL_LOCALE = '00000000000000000071'
QUAL_PERCENT_APPROVED = '000000000000000000L0'


def local_links(db: TaskDB, base_url: str, n: int) -> List[str]:
    """Create ``n`` local workers and return their private links."""
    base = base_url.rstrip('/')
    return [f'{base}/w/{db.add_worker("local")["token"]}' for _ in range(n)]


def generic_entry_url(db: TaskDB, base_url: str) -> str:
    return (
        f'{base_url.rstrip("/")}/start?entry={db.links.entry("generic")}'
        '&PROLIFIC_PID={{%PROLIFIC_PID%}}&STUDY_ID={{%STUDY_ID%}}&SESSION_ID={{%SESSION_ID%}}'
    )


def mturk_entry_url(db: TaskDB, task_url: str) -> str:
    """The ExternalURL of the task's HITs (MTurk appends its own parameters to it)."""
    return f'{task_url.rstrip("/")}/mturk?entry={db.links.entry("mturk")}'


def external_question(url: str, frame_height: int = 0) -> str:
    """The ExternalQuestion XML that makes MTurk show ``url`` in its iframe."""
    return (
        f'<ExternalQuestion xmlns="{EXTERNAL_QUESTION_SCHEMA}"><ExternalURL>{xml_escape(url)}'
        f'</ExternalURL><FrameHeight>{frame_height}</FrameHeight></ExternalQuestion>'
    )


def hits_needed(db: TaskDB) -> int:
    """Assignments needed to cover every unit once per wanted rating (4th annotators extra)."""
    wanted = sum(p['wanted'] for p in db.progress())
    return math.ceil(wanted / db.config['items_per_assignment'])


def mturk_requests(
    entry_url: str,
    n_hits: int,
    reward: str,
    title: str,
    description: str,
    keywords: str,
    minutes_per_assignment: int = 30,
    lifetime_hours: int = 72,
    assignments_per_hit: int = 1,
    min_approval: Optional[int] = 95,
    locales: Optional[List[str]] = ('US',),
    batch: Optional[str] = None,
) -> List[dict]:
    """The ``create_hit`` keyword arguments for each HIT, showing ``entry_url``
    (:func:`mturk_entry_url`).

    ``UniqueRequestToken`` (batch + index) makes a retried launch idempotent on MTurk's side.
    """
    batch = batch or time.strftime('%Y%m%d%H%M%S')
    if not entry_url.startswith('https://'):
        raise ValueError('MTurk shows only https:// ExternalQuestion URLs')
    float(reward)  # a decimal string such as '0.80'
    quals = []
    if min_approval is not None:
        quals.append(
            {
                'QualificationTypeId': QUAL_PERCENT_APPROVED,
                'Comparator': 'GreaterThanOrEqualTo',
                'IntegerValues': [int(min_approval)],
                'ActionsGuarded': 'DiscoverPreviewAndAccept',
            }
        )
    if locales:
        quals.append(
            {
                'QualificationTypeId': QUAL_LOCALE,
                'Comparator': 'In',
                'LocaleValues': [{'Country': c} for c in locales],
                'ActionsGuarded': 'DiscoverPreviewAndAccept',
            }
        )
    request = {
        'Title': title,
        'Description': description,
        'Keywords': keywords,
        'Reward': reward,
        'MaxAssignments': assignments_per_hit,
        'AssignmentDurationInSeconds': minutes_per_assignment * 60,
        'LifetimeInSeconds': lifetime_hours * 3600,
        'AutoApprovalDelayInSeconds': 3 * 24 * 3600,
        'Question': external_question(entry_url),
        'QualificationRequirements': quals,
    }
    return [dict(request, UniqueRequestToken=f'{batch}-{i}') for i in range(n_hits)]


def mturk_client(environment: str, profile: Optional[str] = None, region: str = 'us-east-1'):
    """A boto3 MTurk client for 'sandbox' or 'live', credentials from the usual chain."""
    import boto3

    session = boto3.Session(profile_name=profile) if profile else boto3.Session()
    return session.client('mturk', region_name=region, endpoint_url=MTURK_ENDPOINTS[environment])


def create_hits(
    requests: List[dict],
    environment: str = 'sandbox',
    dry_run: bool = False,
    client=None,
    printer: Callable[[str], None] = print,
    profile: Optional[str] = None,
) -> List[Dict[str, str]]:
    """Send (or with ``dry_run`` only print) the HIT requests; returns the created HIT ids."""
    if environment not in MTURK_ENDPOINTS:
        raise ValueError(f"environment must be 'sandbox' or 'live', got {environment!r}")
    if dry_run:
        for req in requests:
            printer(
                json.dumps(
                    {'operation': 'CreateHIT', 'endpoint': MTURK_ENDPOINTS[environment], 'params': req}, indent=2
                )
            )
        return []
    client = client or mturk_client(environment, profile)
    balance = client.get_account_balance().get('AvailableBalance')
    printer(f'MTurk {environment} balance: {balance}')
    created = []
    for req in requests:
        hit = client.create_hit(**req)['HIT']
        created.append({'HITId': hit['HITId'], 'HITTypeId': hit['HITTypeId']})
    if created:
        printer(f'Preview: {MTURK_WORKER_SITES[environment]}{created[0]["HITTypeId"]}')
    return created


def mturk_client_errors() -> tuple:
    """What an MTurk client raises for a request MTurk refuses (botocore's ClientError, with
    boto3), plus what a test double raises."""
    try:
        from botocore.exceptions import ClientError
    except ImportError:  # a test double without botocore
        return (LookupError, ValueError)
    return (ClientError, LookupError, ValueError)


def mturk_error_code(err) -> str:
    """MTurk's error code of a refused request (its class name for anything else)."""
    response = getattr(err, 'response', None) or {}
    return response.get('Error', {}).get('Code') or type(err).__name__
