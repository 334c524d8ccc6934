"""Run ParlAI's ACUTE-Eval or turn-annotation task on Mephisto, everything under one run folder.

``parlai empathy_acute_run`` calls :func:`launch`. Defaults: Mephisto's mock provider (workers
open ``http://127.0.0.1:PORT/?worker_id=NAME&assignment_id=ANY``) and its local architect, whose
router (our copy, :mod:`.pages`) listens on 127.0.0.1 only. What a run folder holds::

    RUN/launch.json          what was launched (kind, inputs, provider, question, task name)
    RUN/mephisto/            Mephisto's database.db, its data/ and tmp/ (never ~/.mephisto or
                             site-packages)
    RUN/router_source/       the router copy the local architect deploys
    RUN/task/                the files the blueprint reads (annotation buckets, descriptions)

MTurk (``--provider mturk_sandbox`` or ``mturk``) uses Mephisto's own MTurk provider: workers must
reach the task page, which the local architect serves on 127.0.0.1 only, so put your own reverse
proxy (https) in front of it and pass its address as ``--public-url``, or use Mephisto's heroku or
ec2 architect (see docs/human_evaluation.md). ``--dry-run true`` builds and validates, without a
network, the MTurk requests Mephisto would send, prints them with the cost, and posts nothing.
"""

import contextlib
import json
import math
import os
import signal
import time
from dataclasses import asdict, dataclass
from typing import Callable, Dict, List, Optional

from parlai_empathy.humaneval import questions
from parlai_empathy.humaneval.crowd import bridge, pages
from parlai_empathy.humaneval.inputs import InputError
from parlai_empathy.integration import compat

KINDS = ('acute', 'turns')
PROVIDERS = ('mock', 'mturk_sandbox', 'mturk')
# MTurk's commission on a HIT with fewer than 10 assignments (Mephisto posts one per HIT)
MTURK_FEE = 0.20


@dataclass
class CrowdRun:
    kind: str  # 'acute' or 'turns'
    inputs: str  # the folder parlai empathy_acute_build wrote
    run_dir: str
    provider: str = 'mock'
    requester: Optional[str] = None  # Mephisto requester = AWS profile name, for MTurk
    port: int = 3000
    public_url: Optional[str] = None  # what workers open, for MTurk behind a proxy
    question: str = 'empathy'  # a key of questions.ACUTE_QUESTIONS (ACUTE)
    subtasks_per_unit: int = 5
    annotations_per_pair: int = 1  # ACUTE: judgments per pairing; turns: workers per unit
    maximum_units_per_worker: int = 1
    reward: float = 0.5
    minutes_per_unit: int = 30
    no_submission_patience: int = 3600  # seconds without a submission before the run ends
    task_name: Optional[str] = None
    seed: int = 42

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f'--crowd-task must be one of {", ".join(KINDS)}, got {self.kind!r}')
        if self.provider not in PROVIDERS:
            raise ValueError(f'--provider must be one of {", ".join(PROVIDERS)}, got {self.provider!r}')
        if self.kind == 'acute' and self.question not in questions.ACUTE_QUESTIONS:
            raise ValueError(f'--question must be one of {", ".join(questions.ACUTE_QUESTIONS)}, got {self.question!r}')
        if self.provider != 'mock' and not self.requester:
            raise ValueError(f'--provider {self.provider} needs --requester (an AWS profile name)')
        if self.provider != 'mock' and not (self.public_url or '').startswith('https://'):
            raise ValueError(
                f'--provider {self.provider} needs --public-url https://...: MTurk workers cannot reach '
                f'127.0.0.1:{self.port}, where the task is served (put your own https proxy in front of '
                'it, see docs/human_evaluation.md)'
            )
        if self.subtasks_per_unit < 1 or self.annotations_per_pair < 1:
            raise ValueError('--subtasks-per-unit and --annotations-per-pair must be >= 1')
        if not 0 < self.port < 65536:
            raise ValueError(f'--port must be 1..65535, got {self.port}')
        self.task_name = self.task_name or (
            f'empathy_acute_{self.question}' if self.kind == 'acute' else 'empathy_turn_annotations'
        )

    @property
    def mephisto_dir(self) -> str:
        return os.path.join(self.run_dir, 'mephisto')

    @property
    def database(self) -> str:
        return os.path.join(self.mephisto_dir, 'database.db')


def _input(run: CrowdRun, name: str) -> str:
    path = os.path.join(run.inputs, name)
    if not os.path.isfile(path):
        raise InputError(f'{path}: missing; write the inputs with parlai empathy_acute_build')
    return path


def _count_lines(path: str) -> int:
    with open(path, encoding='utf-8') as f:
        return sum(1 for line in f if line.strip())


def acute_pairings(run: CrowdRun) -> int:
    """The pairings to judge (onboarding pairs not counted)."""
    with open(_input(run, bridge.PAIRINGS), encoding='utf-8') as f:
        return sum(1 for line in f if line.strip() and not json.loads(line).get('is_onboarding'))


def units(run: CrowdRun) -> int:
    """The HITs the run releases (Mephisto posts one assignment per unit)."""
    if run.kind == 'acute':
        # ParlAI's AcuteEvalBlueprint.get_initialization_data: one subtask of each unit is
        # assumed to be onboarding
        wanted = acute_pairings(run) * run.annotations_per_pair
        return math.ceil(wanted / max(run.subtasks_per_unit - 1, 1))
    conversations = _count_lines(_input(run, bridge.TURNS))
    return math.ceil(conversations / run.subtasks_per_unit) * run.annotations_per_pair


def cost(run: CrowdRun) -> Dict[str, float]:
    n = units(run)
    fees = round(n * run.reward * MTURK_FEE, 2)
    return {
        'hits': n,
        'reward': run.reward,
        'rewards': round(n * run.reward, 2),
        'fees': fees,
        'total': round(n * run.reward + fees, 2),
    }


def cost_line(run: CrowdRun) -> str:
    c = cost(run)
    return (
        f"cost: {c['hits']} HITs x ${c['reward']:.2f} = ${c['rewards']:.2f} + MTurk's "
        f'{MTURK_FEE:.0%} fee ${c["fees"]:.2f} = ${c["total"]:.2f}'
    )


def _write_task_files(run: CrowdRun) -> Dict[str, str]:
    """The files the turn-annotation blueprint reads, written from :mod:`..questions`."""
    folder = os.path.join(run.run_dir, 'task')
    os.makedirs(folder, exist_ok=True)
    paths = {n: os.path.join(folder, n) for n in ('buckets.json', 'description.txt', 'onboarding.json')}
    with open(paths['buckets.json'], 'w', encoding='utf-8') as f:
        json.dump(
            {'config': {k: {'name': name, 'description': text} for k, (name, text) in questions.TURN_BUCKETS.items()}},
            f,
            indent=1,
        )
    with open(paths['description.txt'], 'w', encoding='utf-8') as f:
        f.write(questions.TURN_DESCRIPTION)
    with open(_input(run, bridge.TURNS_ONBOARDING), encoding='utf-8') as f:
        onboarding = json.load(f)
    # the page gets the practice conversations, never their answers (checked on the server)
    with open(paths['onboarding.json'], 'w', encoding='utf-8') as f:
        json.dump({'conversations': onboarding['conversations']}, f)
    paths['answers'] = onboarding['answers']
    return paths


def onboarding_check(answers: List[dict]) -> Callable[[dict], bool]:
    """Mephisto's ``validate_onboarding``: every practice reply's buckets as expected."""

    def validate(data: dict) -> bool:
        try:
            done = data['outputs']['final_data']
            for expected, conversation in zip(answers, done, strict=True):
                judged = [u for u in conversation['data'] if u.get('do_annotate')]
                if len(judged) != 1 or any(bool(judged[0].get(k)) != v for k, v in expected.items()):
                    return False
            return True
        except (KeyError, TypeError, ValueError):
            return False  # a malformed practice answer fails the practice

    return validate


def _config(run: CrowdRun, page: Dict[str, str], router: str):
    """The Mephisto run config, built in Python (the ParlAI wheel ships no hydra configs)."""
    from mephisto.data_model.task_run import TaskRunArgs
    from mephisto.operations.hydra_config import DatabaseArgs, MephistoConfig
    from omegaconf import OmegaConf

    from parlai_empathy.humaneval.crowd.blueprints import EmpathyAcuteArgs, EmpathyLocalArchitectArgs

    question, s1, s2 = questions.ACUTE_QUESTIONS.get(run.question, ('', '', ''))
    if run.kind == 'acute':
        blueprint = EmpathyAcuteArgs(
            pairings_filepath=_input(run, bridge.PAIRINGS),
            task_source=page['acute'],
            eval_question=question,
            s1_choice=s1,
            s2_choice=s2,
            num_matchup_pairs=acute_pairings(run) * run.annotations_per_pair,
            annotations_per_pair=run.annotations_per_pair,
            subtasks_per_unit=run.subtasks_per_unit,
            block_on_onboarding_fail=True,
            random_seed=run.seed,
        )
        title, description = 'Which listener responds better?', questions.ACUTE_DESCRIPTION
    else:
        from parlai.crowdsourcing.tasks.turn_annotations_static.turn_annotations_blueprint import (
            TurnAnnotationsStaticBlueprintArgs,
        )

        files = _write_task_files(run)
        blueprint = TurnAnnotationsStaticBlueprintArgs(
            task_source=page['turns'],
            data_jsonl=_input(run, bridge.TURNS),
            subtasks_per_unit=run.subtasks_per_unit,
            annotation_last_only=True,
            annotation_question=questions.TURN_QUESTION,
            annotations_config_path=files['buckets.json'],
            task_description_file=files['description.txt'],
            onboarding_data=files['onboarding.json'],
            onboarding_qualification=f'{run.task_name}_onboarding',
            units_per_assignment=run.annotations_per_pair,
            random_seed=run.seed,
        )
        title, description = questions.TURN_TITLE, questions.TURN_DESCRIPTION
    config = OmegaConf.structured(
        MephistoConfig(
            blueprint=blueprint,
            architect=EmpathyLocalArchitectArgs(
                hostname='127.0.0.1', port=str(run.port), server_source_path=router, public_url=run.public_url or ''
            ),
            provider=_provider_args(run),
            task=TaskRunArgs(
                task_name=run.task_name,
                task_title=title,
                task_description=description,
                task_reward=run.reward,
                task_tags='dialogue,empathy,rating',
                assignment_duration_in_seconds=run.minutes_per_unit * 60,
                maximum_units_per_worker=run.maximum_units_per_worker,
                allowed_concurrent=1,
                no_submission_patience=run.no_submission_patience,
            ),
            database=DatabaseArgs(),
        )
    )
    if run.kind == 'acute':
        # ACUTE soft-blocks a worker who fails its onboarding pairs with this qualification
        config.blueprint.block_qualification = f'{run.task_name}_failed_onboarding'
    return config


def _provider_args(run: CrowdRun):
    if run.provider == 'mock':
        from mephisto.abstractions.providers.mock.mock_provider import MockProviderArgs

        return MockProviderArgs(requester_name='MOCK_REQUESTER')
    if run.provider == 'mturk_sandbox':
        from mephisto.abstractions.providers.mturk_sandbox.sandbox_mturk_provider import (
            SandboxMTurkProviderArgs,
        )

        return SandboxMTurkProviderArgs(requester_name=run.requester)
    from mephisto.abstractions.providers.mturk.mturk_provider import MTurkProviderArgs

    return MTurkProviderArgs(requester_name=run.requester)


def _shared_state(run: CrowdRun):
    if run.kind == 'acute':
        return None  # ACUTE's blueprint makes its own
    from mephisto.abstractions.blueprints.abstract.static_task.static_blueprint import (
        SharedStaticTaskState,
    )

    files = _write_task_files(run)
    with open(files['onboarding.json'], encoding='utf-8') as f:
        practice = json.load(f)
    return SharedStaticTaskState(onboarding_data=practice, validate_onboarding=onboarding_check(files['answers']))


def mturk_requests(run: CrowdRun, config) -> List[dict]:
    """The requests Mephisto's MTurk provider sends for this run (``create_hit_type``, then one
    ``create_hit_with_hit_type`` per unit), built by Mephisto's own functions against an MTurk
    client whose every call botocore validates against MTurk's API model and answers from a stub,
    so nothing leaves this machine."""
    import botocore.session
    from botocore.stub import Stubber
    from mephisto.abstractions.providers.mturk import mturk_utils

    endpoint = (
        'https://mturk-requester-sandbox.us-east-1.amazonaws.com'
        if run.provider == 'mturk_sandbox'
        else 'https://mturk-requester.us-east-1.amazonaws.com'
    )
    client = botocore.session.get_session().create_client(
        'mturk',
        region_name='us-east-1',
        endpoint_url=endpoint,
        aws_access_key_id='DRYRUN',
        aws_secret_access_key='DRYRUN',
    )
    sent: List[dict] = []
    client.meta.events.register(
        'provide-client-params.mturk.*',
        lambda params, model, **_: sent.append({'operation': model.name, 'params': dict(params)}),
    )
    n = units(run)
    url = run.public_url or f'http://127.0.0.1:{run.port}'
    with Stubber(client) as stub:
        stub.add_response('create_hit_type', {'HITTypeId': 'DRYRUNHITTYPE'})
        for i in range(n):
            stub.add_response(
                'create_hit_with_hit_type', {'HIT': {'HITId': f'DRYRUNHIT{i}', 'HITTypeId': 'DRYRUNHITTYPE'}}
            )
        hit_type = mturk_utils.create_hit_type(client, config.task, [])
        for _ in range(n):
            mturk_utils.create_hit_with_hit_type(client, 0, url, hit_type)
    return sent


def prepare(run: CrowdRun, cache: Optional[str] = None):
    """Check the inputs, build the pages and the router copy, and make Mephisto importable."""
    _input(run, bridge.PAIRINGS if run.kind == 'acute' else bridge.TURNS)
    os.makedirs(run.run_dir, exist_ok=True)
    built = pages.build_pages(cache)
    router = pages.router_copy(run.run_dir, cache)
    compat.prepare_crowd(run.mephisto_dir)
    config = _config(run, {'acute': built.acute, 'turns': built.turns}, router)
    with open(os.path.join(run.run_dir, 'launch.json'), 'w', encoding='utf-8') as f:
        json.dump(dict(asdict(run), units=units(run)), f, indent=1)
    return config


def worker_url(run: CrowdRun, worker: str, assignment: str = '1') -> str:
    return f'http://127.0.0.1:{run.port}/?worker_id={worker}&assignment_id={assignment}'


def launch(
    run: CrowdRun, dry_run: bool = False, cache: Optional[str] = None, printer: Callable[[str], None] = print
) -> Optional[str]:
    """Launch the run and serve it until every unit is done (or ``no_submission_patience``
    passes); returns the task run id. With ``dry_run``, print what would be posted and stop."""
    config = prepare(run, cache)
    if run.provider != 'mock':
        printer(cost_line(run))
    if dry_run:
        if run.provider != 'mock':
            for request in mturk_requests(run, config):
                printer(json.dumps(request, indent=1))
        printer(f'dry run: nothing launched ({units(run)} units of {run.task_name} in {run.run_dir})')
        return None
    from mephisto.abstractions.databases.local_database import LocalMephistoDB
    from mephisto.operations.operator import Operator

    if run.provider != 'mock':
        _ensure_requester(LocalMephistoDB(database_path=run.database), run)
    operator = Operator(LocalMephistoDB(database_path=run.database))
    try:
        task_run_id = operator.launch_task_run_or_die(config, _shared_state(run))
        printer(f'task {run.task_name} (run {task_run_id}): {units(run)} units, database {run.database}')
        if run.provider == 'mock':
            printer(f'workers open {worker_url(run, "WORKER")} (any WORKER name; one unit each)')
        printer(
            'Ctrl-C once: Mephisto expires the units nobody took and waits for the workers at '
            'work; once more: it ends their units too and quits. Answers given stay in the database.'
        )
        operator.wait_for_runs_then_shutdown(skip_input=True, log_rate=60)
    finally:
        stopped = stop_routers(run.run_dir)
        if stopped:
            printer(f'stopped {stopped} router process(es) Mephisto left running')
    return task_run_id


def stop_routers(run_dir: str, timeout: float = 10) -> int:
    """End the router processes serving from a run folder's deploy folder (Mephisto's local
    architect starts each in a process group of its own, ``local_architect.py:152``, and a
    shutdown cut short leaves it running); returns how many were still running."""
    deployed = os.path.realpath(os.path.join(run_dir, 'mephisto', 'tmp'))
    found = []
    for pid in filter(str.isdigit, os.listdir('/proc')):
        try:
            cwd = os.readlink(f'/proc/{pid}/cwd').removesuffix(' (deleted)')
        except OSError:
            continue
        if cwd == deployed or cwd.startswith(deployed + os.sep):
            found.append(int(pid))
    for pid in found:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while any(os.path.exists(f'/proc/{pid}') for pid in found) and time.monotonic() < deadline:
        time.sleep(0.1)
    for pid in found:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return len(found)


def _ensure_requester(db, run: CrowdRun) -> None:
    """A Mephisto requester named like the AWS profile that holds the MTurk credentials."""
    if db.find_requesters(requester_name=run.requester):
        return
    if run.provider == 'mturk_sandbox':
        from mephisto.abstractions.providers.mturk_sandbox.sandbox_mturk_requester import (
            SandboxMTurkRequester as Requester,
        )
    else:
        from mephisto.abstractions.providers.mturk.mturk_requester import MTurkRequester as Requester
    Requester.new(db, run.requester)
