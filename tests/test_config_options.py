"""Model configs as agent options (``parlai_empathy.agents.config_options``): one name per setting
from the command line to the config, the config's defaults the options' defaults."""

import dataclasses
from dataclasses import dataclass, field
from typing import Optional

import pytest
from parlai.core.params import ParlaiParser

from parlai_empathy.agents.config_options import (
    add_config_options,
    config_from_opt,
    option_defaults,
    option_fields,
    option_name,
)
from parlai_empathy.agents.emotion_generator import NEW_MODEL_FLAGS
from parlai_empathy.models.ethreed import EthreedConfig
from parlai_empathy.models.generator_interface import EmotionTransformerConfig
from parlai_empathy.models.mime import MimeConfig
from parlai_empathy.models.moel import MoelConfig
from parlai_empathy.models.multitask_transformer import MultitaskConfig
from parlai_empathy.models.transformer_blocks import TransformerSize


@dataclass(frozen=True, kw_only=True)
class Inner:
    width_size: int = field(default=8, metadata={'help': 'the width', 'aliases': ('-ws',)})
    fixed_steps: int = field(default=40, metadata={'option': False})


@dataclass(frozen=True, kw_only=True)
class Toy:
    inner: Inner = Inner()
    rate: float = 0.5
    use_gate: bool = field(default=True, metadata={'help': 'a gate'})
    kind: str = field(default='simple', metadata={'choices': ('simple', 'bilinear')})
    latent_size: Optional[int] = 300


def _parser(config_cls, **kwargs):
    parser = ParlaiParser(False, False)
    add_config_options(parser.add_argument_group('toy'), config_cls, **kwargs)
    return parser


def _parse(parser, args):
    """The options ``args`` give (ParlAI's parser returns them as an ``Opt``)."""
    return dict(parser.parse_args(list(args)))


def _actions(parser):
    return {action.dest: action for action in parser._actions if action.option_strings and action.dest != 'help'}


def test_option_names_types_defaults_and_help_come_from_the_fields():
    actions = _actions(_parser(Toy))
    assert set(actions) == {'width_size', 'rate', 'use_gate', 'kind', 'latent_size'}
    assert actions['width_size'].option_strings[0] == '--width-size'  # and the alias (ParlAI spells it --ws)
    assert actions['width_size'].help == 'the width' and actions['width_size'].default == 8
    assert actions['rate'].type is float and actions['rate'].default == 0.5 and actions['rate'].help is None
    assert actions['use_gate'].type == 'bool' and actions['use_gate'].default is True
    assert actions['kind'].choices == ['simple', 'bilinear']
    assert actions['latent_size'].type is int  # Optional[int]: an int option
    assert option_name('latent_size') == '--latent-size'
    assert option_defaults(Toy) == {
        'width_size': 8,
        'rate': 0.5,
        'use_gate': True,
        'kind': 'simple',
        'latent_size': 300,
    }


def test_round_trip_from_the_command_line_to_the_config():
    parser = _parser(Toy)
    assert config_from_opt(Toy, _parse(parser, [])) == Toy()
    opt = _parse(parser, ['-ws', '16', '--use-gate', 'false', '--kind', 'bilinear', '--rate', '2'])
    config = config_from_opt(Toy, opt, latent_size=None)
    assert config == Toy(inner=Inner(width_size=16), rate=2.0, use_gate=False, kind='bilinear', latent_size=None)
    # what the agent derives goes to the nested config too; a field no option sets keeps its default
    assert config_from_opt(Toy, opt, fixed_steps=3).inner == Inner(width_size=16, fixed_steps=3)
    with pytest.raises(SystemExit):
        parser.parse_args(['--kind', 'other'])


def test_a_missing_option_or_an_unknown_field_is_an_error_naming_it():
    opt = _parse(_parser(Toy), [])
    del opt['rate']
    with pytest.raises(KeyError, match='--rate'):
        config_from_opt(Toy, opt)
    with pytest.raises(TypeError, match='nothing'):
        config_from_opt(Toy, _parse(_parser(Toy), []), nothing=1)
    with pytest.raises(KeyError, match='nothing'):
        _parser(Toy, defaults={'nothing': None})


def test_defaults_replace_only_the_named_options_and_inherited_leaves_the_base_fields():
    actions = _actions(_parser(Toy, defaults={'use_gate': None}))
    assert actions['use_gate'].default is None and actions['rate'].default == 0.5
    assert set(_actions(_parser(MimeConfig, inherited=EmotionTransformerConfig))) == {
        'latent_size',
        'mimicry',
        'emotion_grouping',
        'stochastic',
        'elbo_weight',
    }


@pytest.mark.parametrize(
    'config_cls', [TransformerSize, EmotionTransformerConfig, MimeConfig, MultitaskConfig, MoelConfig, EthreedConfig]
)
def test_configs_are_frozen_and_built_by_keyword(config_cls):
    config = config_cls()
    name = dataclasses.fields(config_cls)[0].name
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(config, name, getattr(config, name))
    with pytest.raises(TypeError):
        config_cls(getattr(config, name))  # no positional values


AGENT_CONFIGS = [
    ('empathy/mime', MimeConfig),
    ('empathy/multitask_transformer', MultitaskConfig),
    ('empathy/moel', MoelConfig),
    ('empathy/ethreed', EthreedConfig),
]


def _agent_actions(model):
    parser = ParlaiParser(True, True)
    parser.add_model_subargs(model, None)
    return parser, _actions(parser)


@pytest.mark.parametrize('model, config_cls', AGENT_CONFIGS)
def test_every_config_field_is_an_option_of_its_agent_with_the_same_default(model, config_cls):
    parser, actions = _agent_actions(model)
    for config_field, _ in option_fields(config_cls):
        action = actions.get(config_field.name)
        assert action is not None, f'{config_cls.__name__}.{config_field.name} is no option of {model}'
        assert option_name(config_field.name) in action.option_strings
        if config_field.name in NEW_MODEL_FLAGS and model != 'empathy/ethreed':
            assert action.default is None  # unset: the field's default for a new model
        else:
            assert action.default == config_field.default, config_field.name
    # the agent's defaults build the config's defaults
    opt = _parse(parser, [])
    derived = {}
    if config_cls is not EthreedConfig:
        derived = dict(
            max_positions=TransformerSize().max_positions,
            **{key: option_defaults(config_cls)[key] for key in NEW_MODEL_FLAGS},
        )
    assert config_from_opt(config_cls, opt, **derived) == config_cls()


def test_a_changed_option_reaches_the_config_under_the_same_name():
    parser, _ = _agent_actions('empathy/mime')
    opt = _parse(
        parser,
        [
            '--latent-size',
            '16',
            '--emotion-grouping',
            'false',
            '-esz',
            '32',
            '--attention-size',
            '8',
            '--emotion-loss-weight',
            '2',
        ],
    )
    config = config_from_opt(MimeConfig, opt, max_positions=1024, ffn_final_relu=True, reference_tags=True)
    assert (config.latent_size, config.emotion_grouping, config.emotion_loss_weight) == (16, False, 2.0)
    assert (config.size.embedding_size, config.size.attention_size) == (32, 8)
    parser, _ = _agent_actions('empathy/ethreed')
    opt = _parse(parser, ['--hidden-size', '12', '--emp-policy', 'false', '--emo-track', 'false'])
    assert config_from_opt(EthreedConfig, opt) == EthreedConfig(hidden_size=12, emp_policy=False, emo_track=False)


# ----- options that saved models lack: one migration table per agent ------------------------------


def test_migrations_fill_only_what_the_saved_options_lack_in_version_order():
    from parlai_empathy.agents.config_options import migrate_saved_opt

    tables = {2: {'b': 'two', 'c': 'two'}, 1: {'a': 1, 'b': 'one'}}
    assert migrate_saved_opt({'a': 5}, tables) == {'a': 5, 'b': 'one', 'c': 'two'}
    assert migrate_saved_opt({}, {}) == {}


def _committed_opts():
    import glob
    import json
    import os

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for path in sorted(glob.glob(os.path.join(root, 'projects', '**', '*.opt'), recursive=True)):
        with open(path) as f:
            opt = json.load(f)
        yield os.path.relpath(path, root), opt


def _agent_class(model):
    from parlai.core.loader import load_agent_module

    return load_agent_module(model)


# the options a saved generator's own options decide when unset (``_new_model_flag``)
SAVED_FORM_OPTIONS = ('embeddings_scale', 'ffn_final_relu', 'reference_tags', 'amsgrad')
GENERATORS = ('empathy/mime', 'empathy/multitask_transformer', 'empathy/ethreed')


def test_every_committed_model_lacking_such_an_option_is_covered_by_its_agents_table():
    """A committed run's options lacking an option whose saved form differs from a new model's:
    the agent's migration table says what that run had, so loading its options again gives the
    form it was trained with."""
    seen = 0
    for path, opt in _committed_opts():
        if opt.get('model') not in GENERATORS:
            continue
        table = {}
        for values in _agent_class(opt['model']).OPT_MIGRATIONS.values():
            table.update(values)
        for key in SAVED_FORM_OPTIONS:
            if key == 'amsgrad' or opt['model'] != 'empathy/ethreed':
                seen += 1
                assert key in opt or key in table, f'{path}: {key} is neither saved nor migrated'
    assert seen


def test_upgrade_opt_gives_a_saved_model_what_it_had():
    from parlai.core.opt import Opt

    saved = {'inference': 'beam', 'beam_size': 5}  # what ParlAI's own upgrades read

    mime = _agent_class('empathy/mime').upgrade_opt(Opt({**saved, 'ffn_final_relu': True}))
    assert (mime['ffn_final_relu'], mime['reference_tags'], mime['embeddings_scale'], mime['amsgrad']) == (
        True,
        False,
        False,
        True,
    )
    ethreed = _agent_class('empathy/ethreed').upgrade_opt(Opt(saved))
    assert ethreed['amsgrad'] is True


def test_the_rankers_committed_models_saved_the_options_whose_fallbacks_were_retired():
    """The ranker keeps no migration table: every committed ranker run saved these options."""
    retired = ('add_special_tokens', 'truncate_side', 'turn_separator', 'freeze_word_embeddings')
    rankers = [(path, opt) for path, opt in _committed_opts() if opt.get('model') == 'empathy/bert_ranker']
    assert rankers
    for path, opt in rankers:
        assert all(key in opt for key in retired), path
