"""``parlai empathy_clean_report``: print (and write) the ED cleaning report of each split."""

from parlai.core.params import ParlaiParser
from parlai.core.script import register_script

from parlai_empathy.data import ed_raw, ed_source
from parlai_empathy.data.file_errors import exit_on_data_errors
from parlai_empathy.integration.commands import EmpathyScript
from parlai_empathy.tasks.ed import clean_report_dir


@register_script('empathy_clean_report')
class EmpathyCleanReport(EmpathyScript):
    @classmethod
    def setup_args(cls):
        parser = ParlaiParser(True, False, 'Print the EmpatheticDialogues cleaning report')
        parser.add_argument('--ed-datapath', type=str, default=None, help='as for the empathy_ed_clean teacher')
        parser.add_argument(
            '--splits', type=str, default='train,valid,test', help='comma-separated ED splits to report on'
        )
        parser.add_argument('--json', type='bool', default=False, help='print the JSON report instead')
        return parser

    def run(self):
        # a missing or unreadable file ends the command with its one-line message
        with exit_on_data_errors():
            return self._run()

    def _run(self):
        import json

        folder = ed_source.resolve_ed_dir(self.opt.get('ed_datapath'), self.opt['datapath'])
        reports = {}
        for split in self.opt['splits'].split(','):
            path = f'{folder}/{split}.csv'
            _, report = ed_raw.read_clean(path)
            written = ed_raw.write_report(report, clean_report_dir(self.opt['datapath'], path), split)
            reports[split] = report.to_dict()
            if not self.opt['json']:
                print(report.summary())
                print(f'  written to {written}\n')
        if self.opt['json']:
            print(json.dumps(reports, indent=1))
        return reports


if __name__ == '__main__':
    EmpathyCleanReport.main()
