"""What every ``parlai empathy_*`` command shares: a help that lists each option once and works
beside required options.

Two things in ParlAI 1.7.2's command line get in the way of a command's ``--help``, and both are
dealt with here, for the commands of this package only (ParlAI's own commands are left as they
are):

* ``parlai <command> --help`` lists every option twice: the super-command copies each of the
  script's options into the subcommand's own option group *and* appends the script's groups,
  which hold them too. Our ``-h/--help`` shows the subcommand's own groups without what a script
  group already shows.
* ``ParlaiParser.add_extra_args`` first parses the command line without ``--help`` (only to find
  the task and model whose options to add), and that parse enforces required options: a command
  with a required ``-mf`` answered ``--help`` with "Parse Error: the following arguments are
  required" and exit status 2. Our required options are declared to argparse as optional and
  checked when the command runs, with argparse's own message and exit status 2.

A command subclasses :class:`EmpathyScript` instead of ``ParlaiScript``; nothing else changes in
how it declares its options (``required=True`` included).
"""

import argparse
import sys

from parlai.core.script import ParlaiScript

_REQUIRED = '_empathy_required'  # attribute set on an action whose option must be given


def _help_once(parser) -> str:
    own = [group for group in (parser._positionals, parser._optionals) if group in parser._action_groups]
    shown = {id(action) for group in parser._action_groups if group not in own for action in group._group_actions}
    kept = [(group, group._group_actions) for group in own]
    try:
        for group in own:
            group._group_actions = [a for a in group._group_actions if id(a) not in shown]
        return parser.format_help()
    finally:
        for group, actions in kept:
            group._group_actions = actions


class _HelpOnceAction(argparse.Action):
    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, help=None):
        super().__init__(option_strings=option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        parser._print_message(_help_once(parser), sys.stdout)
        parser.exit()


def prepare(parser):
    """Give ``parser`` (a command's, as ``setup_args`` built it) the help and the required options
    described above; returns it."""
    if parser is None:
        return parser
    for action in parser._actions:
        if action.required and action.option_strings:
            action.required = False
            setattr(action, _REQUIRED, True)
    # ParlaiParser resolves conflicting option strings: this replaces argparse's own -h/--help
    parser.add_argument('-h', '--help', action=_HelpOnceAction, help='show this help message and exit')
    return parser


def missing_required(parser, opt):
    """The flags of the required options that ``opt`` lacks."""
    return [
        argparse._get_action_name(action)
        for action in parser._actions
        if getattr(action, _REQUIRED, False) and opt.get(action.dest) is None
    ]


class EmpathyScript(ParlaiScript):
    """``ParlaiScript`` for the commands of this package (see the module's docstring)."""

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        own = cls.__dict__.get('setup_args')
        if own is None:
            return
        build = own.__func__

        @classmethod
        def setup_args(klass):
            return prepare(build(klass))

        cls.setup_args = setup_args

    @classmethod
    def _run_from_parser_and_opt(cls, opt, parser):
        # ``parser`` is the super-command's under ``parlai <command>``: the command's own options
        # are those of its setup_args
        own = cls.setup_args()
        missing = missing_required(own, opt)
        if missing:
            own.error(f'the following arguments are required: {", ".join(missing)}')
        return super()._run_from_parser_and_opt(opt, parser)
