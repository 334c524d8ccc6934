#!/usr/bin/env python3
"""``parlai empathy_chat -mf MODEL``: chat with a model in the browser (http://127.0.0.1:8080/).

    parlai empathy_chat -mf zoo:empathy/mime/model
    parlai empathy_chat -mf runs/ethreed/model --port 8090

Each reply shows the emotion the model read in your message (ETHREED: the speaker emotion it
tracks and the one planned for its reply). See :mod:`parlai_empathy.serving.chat`.
"""

from parlai.core.params import ParlaiParser
from parlai.core.script import register_script
from parlai.utils import logging

from parlai_empathy.integration.commands import EmpathyScript
from parlai_empathy.integration.safe_loading import add_trust_flag


@register_script('empathy_chat')
class EmpathyChat(EmpathyScript):
    @classmethod
    def setup_args(cls):
        parser = ParlaiParser(True, False, 'Chat with a parlai-empathy model in the browser')
        parser.add_argument('-mf', '--model-file', required=True, help='model file, or zoo:empathy/<name>/model')
        parser.add_argument(
            '--host', default='127.0.0.1', help='interface to listen on (default 127.0.0.1: this machine only)'
        )
        parser.add_argument('--port', type=int, default=8080, help='port to listen on')
        # defaults None: the chat module's own (MAX_SESSIONS, MAX_SESSIONS_PER_CLIENT; docs/security.md),
        # which this module does not import: every parlai command builds this parser
        parser.add_argument(
            '--max-conversations',
            type=int,
            default=None,
            help="conversations kept at once, each with a copy of the agent's history (default: 64)",
        )
        parser.add_argument(
            '--max-conversations-per-client',
            type=int,
            default=None,
            help='conversations one client address holds at once (a household or office '
            'shares one); a new address takes a place from the address holding the most '
            '(default: 4)',
        )
        return add_trust_flag(parser)

    def run(self):
        from parlai_empathy.serving.chat import serve

        opt = self.opt
        if opt['host'] not in ('127.0.0.1', 'localhost', '::1'):
            logging.warning(f'--host {opt["host"]}: the chat is reachable from other machines, without any login')
        caps = {}
        for name in ('max_conversations', 'max_conversations_per_client'):
            if opt[name] is not None:
                if opt[name] < 1:
                    raise SystemExit(f'--{name.replace("_", "-")} {opt[name]}: must be at least 1')
                caps[name] = opt[name]
        serve(
            opt['model_file'],
            opt['host'],
            opt['port'],
            trust=bool(opt.get('trust_model_file')),
            datapath=opt.get('datapath'),
            **caps,
        )


if __name__ == '__main__':
    EmpathyChat.main()
