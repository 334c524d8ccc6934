"""A model config's fields as an agent's command-line options, and the config back from ``opt``.

The models (``parlai_empathy.models``) never import ParlAI; each has a frozen dataclass config
that is the one source of its defaults. This module declares every field of such a config as an
option of a ParlAI argument group, under the field's own name (``--latent-size`` for
``latent_size``), with the field's type and default and the help text of the field's metadata,
and builds the config back from the parsed options. One name runs from the command line through
the saved ``.opt`` to the config, so no agent renames an option on its way to its model.

Field metadata read here (all optional):

* ``help``: the option's help text;
* ``choices``: the values the option accepts;
* ``aliases``: further option strings (``('-esz',)``);
* ``option``: ``False`` for a field no option sets (the agent derives it, or it is fixed), which
  :func:`config_from_opt` leaves at its default unless the agent passes it.

A field whose type is itself a config dataclass (``size: TransformerSize``) contributes its own
fields as options, under their names: the nested config is rebuilt from them.
"""

import dataclasses
import typing
from typing import Any, Dict, Iterator, Mapping, Optional, Tuple

# Python types of config fields -> the argparse type ParlAI's parser takes for them
_OPTION_TYPES = {bool: 'bool', int: int, float: float, str: str}


def _is_config(cls) -> bool:
    return isinstance(cls, type) and dataclasses.is_dataclass(cls)


def _field_type(config_cls, field: dataclasses.Field):
    """The field's resolved type, ``Optional[X]`` taken as ``X``."""
    hint = typing.get_type_hints(config_cls)[field.name]
    args = [arg for arg in typing.get_args(hint) if arg is not type(None)]
    if typing.get_origin(hint) is typing.Union and len(args) == 1:
        return args[0]
    return hint


def _default(field: dataclasses.Field):
    if field.default is not dataclasses.MISSING:
        return field.default
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    raise TypeError(f'config field {field.name!r} has no default: every config field needs one')


def option_fields(config_cls, inherited=None) -> Iterator[Tuple[dataclasses.Field, Any]]:
    """``(field, its type)`` of every field of ``config_cls`` that an option sets, nested
    configs' fields in their place (the nested field itself is not one); without the fields of
    the base class ``inherited``."""
    skip = {field.name for field in dataclasses.fields(inherited)} if inherited else set()
    for field in dataclasses.fields(config_cls):
        if field.name in skip:
            continue
        kind = _field_type(config_cls, field)
        if _is_config(kind):
            yield from option_fields(kind)
        elif field.metadata.get('option', True):
            yield field, kind


def option_defaults(config_cls) -> Dict[str, Any]:
    """``{option name: default}`` of the options of ``config_cls`` (the names ``opt`` uses)."""
    return {field.name: _default(field) for field, _ in option_fields(config_cls)}


def option_name(name: str) -> str:
    """The command-line spelling of a config field: ``latent_size`` -> ``--latent-size``."""
    return '--' + name.replace('_', '-')


def add_config_options(group, config_cls, defaults: Optional[Mapping[str, Any]] = None, inherited=None):
    """Declare every option field of ``config_cls`` (see the module docstring) in ``group``;
    with ``inherited`` (a base class of ``config_cls``), only the fields ``config_cls`` adds, where
    the base agent declares the base's.

    ``defaults`` replaces the default of the options it names: only for an option whose default
    is not a value (``None``, resolved when the model is built, e.g. a form that a new model takes
    and a saved one reads from its options)."""
    defaults = dict(defaults or {})
    fields = list(option_fields(config_cls, inherited))
    unknown = set(defaults) - {field.name for field, _ in fields}
    if unknown:
        raise KeyError(f'{config_cls.__name__} has no option field {sorted(unknown)}')
    for field, kind in fields:
        if kind not in _OPTION_TYPES:
            raise TypeError(f'{config_cls.__name__}.{field.name}: no option type for {kind!r}')
        meta = field.metadata
        kwargs = dict(type=_OPTION_TYPES[kind], default=defaults.get(field.name, _default(field)))
        if 'choices' in meta:
            kwargs['choices'] = list(meta['choices'])
        if 'help' in meta:
            kwargs['help'] = meta['help']
        group.add_argument(option_name(field.name), *meta.get('aliases', ()), **kwargs)
    return group


def config_from_opt(config_cls, opt: Mapping[str, Any], **given):
    """``config_cls`` built from ``opt``: each option field from the option of its name, a nested
    config from its own fields, and ``given`` (what the agent derives) as passed. A field no
    option sets and ``given`` does not name keeps its default. An option missing from ``opt``
    is an error naming it, never a silent default."""
    values = {}
    for field in dataclasses.fields(config_cls):
        kind = _field_type(config_cls, field)
        if field.name in given:
            values[field.name] = given.pop(field.name)
        elif _is_config(kind):
            values[field.name] = config_from_opt(
                kind, opt, **{key: given.pop(key) for key in list(given) if key in _field_names(kind)}
            )
        elif field.metadata.get('option', True):
            if field.name not in opt:
                raise _missing(config_cls, field, opt)
            values[field.name] = opt[field.name]
    if given:
        raise TypeError(f'{config_cls.__name__} has no field {sorted(given)}')
    return config_cls(**values)


def _missing(config_cls, field, opt: Mapping[str, Any]) -> BaseException:
    """A config option absent from ``opt``: when the options came from a model's ``.opt`` file,
    the file is at fault and the command ends with one line naming it and the field; otherwise
    it is a ``KeyError`` (a caller that built ``opt`` without the agent's options)."""
    import os

    from parlai_empathy.integration.safe_loading import ModelFileError, ModelFileExit

    what = f'option {option_name(field.name)} ({config_cls.__name__}.{field.name})'
    model_file = opt.get('model_file')
    if isinstance(model_file, str) and os.path.isfile(model_file + '.opt'):
        default = field.default if field.default is not dataclasses.MISSING else None
        return ModelFileExit(
            ModelFileError(
                f'{model_file}.opt: field "{field.name}": missing ({what}); a .opt edited by hand or saved by '
                f'another version? Add the field (its default is {default!r})'
            )
        )
    return KeyError(f'{what} is missing from the options')


def _field_names(config_cls):
    names = set()
    for field in dataclasses.fields(config_cls):
        kind = _field_type(config_cls, field)
        names |= _field_names(kind) if _is_config(kind) else {field.name}
    return names


def migrate_saved_opt(opt, migrations: Mapping[int, Mapping[str, Any]]):
    """``opt`` (a saved model's options) given, for every option it lacks, what a model saved
    without that option had: ``migrations`` maps a table version to ``{option: that value}``,
    applied in version order. An option missing and in no table gets today's default, as ParlAI
    gives every option a saved model lacks."""
    for version in sorted(migrations):
        for key, value in migrations[version].items():
            if key not in opt:
                opt[key] = value
    return opt
