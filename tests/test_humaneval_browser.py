"""A real headless Chromium walks one worker through a Likert and an A/B assignment, and through
tasks whose model replies carry ``<script>`` and ``<img onerror>``: the markup must show as text
and nothing may run (item pages, completion page, admin page, admin export).

Needs Debian's ``chromium`` and ``chromium-driver`` and selenium from PyPI; skips (with the
reason) when Chromium is absent, except where ``PARLAI_EMPATHY_REQUIRE_BROWSER=1`` (CI sets it):
there a missing browser fails the run.
"""

import json
import os
import sqlite3
import tempfile

import pytest

from humaneval_helpers import Server, cached_world_logs, click_and_wait, headless_chromium
from parlai_empathy.humaneval import providers
from parlai_empathy.humaneval.build import build_task

SHOTS = {mode: os.path.join(tempfile.gettempdir(), f'parlai_empathy_humaneval_{mode}.png') for mode in ('likert', 'ab')}

# Untrusted model replies: if either were inserted as markup, it would set window.__xss and open
# an alert (which selenium reports as UnexpectedAlertPresentException on the next command).
XSS_REPLIES = [
    "<script>window.__xss = 'script'; alert('xss')</script>I hear you.",
    "<img src=x onerror=\"window.__xss = 'img'; alert('xss')\">That sounds hard.",
]
XSS_MODEL = "evil<script>alert('model name')</script>"


@pytest.fixture(scope='module')
def logs(tmp_path_factory):
    return cached_world_logs(tmp_path_factory)


@pytest.fixture()
def browser(tmp_path):
    driver = headless_chromium(tmp_path / 'profile')
    yield driver
    driver.quit()


def _walk(driver, link, choose, screenshot, on_item=lambda _driver: None):
    """Open the link, read instructions, answer every item with ``choose(page_text)`` -> values
    (one per question, in order), calling ``on_item(driver)`` on each item page; return the
    number of items and the completion code shown at the end."""
    from selenium.webdriver.common.by import By

    driver.get(link)
    assert driver.find_element(By.ID, 'instructions').is_displayed()
    click_and_wait(driver, 'start')
    seen = 0
    while driver.find_elements(By.ID, 'answer-form'):
        seen += 1
        if seen == 2:  # a mid-assignment reload shows the same item again
            before = driver.find_element(By.NAME, 'slot').get_attribute('value')
            driver.refresh()
            assert driver.find_element(By.NAME, 'slot').get_attribute('value') == before
            driver.save_screenshot(screenshot)
        on_item(driver)
        fieldsets = driver.find_elements(By.TAG_NAME, 'fieldset')
        for fieldset, value in zip(fieldsets, choose(driver.page_source)):
            fieldset.find_element(By.CSS_SELECTOR, f'input[value="{value}"]').click()
        click_and_wait(driver, 'next')
    return seen, driver.find_element(By.ID, 'completion-code').text


def test_browser_likert_and_ab_assignments(logs, tmp_path, browser):
    for path in SHOTS.values():
        if os.path.exists(path):
            os.remove(path)
    likert_db = str(tmp_path / 'likert.db')
    db = build_task(
        likert_db,
        'likert',
        ['gold=' + logs['gold'], 'echo=' + logs['echo']],
        per_emotion=1,
        annotators=1,
        items_per_assignment=4,
        checks_per_assignment=1,
    )
    server = Server(likert_db).start()
    try:
        link = providers.local_links(db, server.base, 1)[0]
        # rate every response 4/2/5; an obviously mismatched one is caught by the check anyway
        n, code = _walk(browser, link, lambda _page: ['4', '2', '5'], SHOTS['likert'])
        assert n == 5 and len(code) == 8
    finally:
        server.kill()
    con = sqlite3.connect(likert_db)
    answers = [json.loads(a) for (a,) in con.execute('SELECT answer FROM answers')]
    assert answers == [{'ratings': {'empathy': 4, 'relevance': 2, 'fluency': 5}}] * 5
    assert con.execute('SELECT completion_code FROM assignments').fetchone()[0] == code
    items = [r[0] for r in con.execute('SELECT u.item_id FROM answers JOIN units u USING (unit_id)')]
    assert len(set(items)) == 5  # never the same item twice
    assert con.execute('SELECT check_passed FROM answers WHERE check_passed IS NOT NULL').fetchall() == [(1,)]

    ab_db = str(tmp_path / 'ab.db')
    db = build_task(
        ab_db,
        'ab',
        ['gold=' + logs['gold'], 'echo=' + logs['echo']],
        num_items=8,
        annotators=1,
        items_per_assignment=4,
        checks_per_assignment=1,
        seed=7,
    )
    server = Server(ab_db).start()
    try:
        link = providers.local_links(db, server.base, 1)[0]
        n, code = _walk(browser, link, lambda _page: ['A'], SHOTS['ab'])
        assert n == 5
    finally:
        server.kill()
    con = sqlite3.connect(ab_db)
    rows = con.execute(
        'SELECT a.answer, u.models FROM answers a JOIN units u USING (unit_id) ORDER BY a.answer_id'
    ).fetchall()
    assert len(rows) == 5
    for answer, models in rows:  # side A always -> the model shown first wins
        assert json.loads(answer)['winners'] == {'overall': json.loads(models)[0]}
    assert con.execute('SELECT completed IS NOT NULL, completion_code FROM assignments').fetchone() == (1, code)
    assert all(os.path.getsize(path) > 10_000 for path in SHOTS.values())


def _evil_world_log(gold_path, out_path):
    """The gold world log with every model reply replaced by one of :data:`XSS_REPLIES`."""
    with open(gold_path, encoding='utf-8') as src, open(out_path, 'w', encoding='utf-8') as out:
        for n, line in enumerate(src):
            conv = json.loads(line)
            for _teacher, model in conv['dialog']:
                model['text'] = XSS_REPLIES[n % len(XSS_REPLIES)]
            out.write(json.dumps(conv) + '\n')
    return out_path


def _assert_inert(driver):
    """No markup from a reply became an element, and nothing ran."""
    from selenium.webdriver.common.by import By

    assert driver.find_elements(By.CSS_SELECTOR, 'main script, main img') == []
    assert driver.execute_script('return window.__xss === undefined')


def _replies_shown_as_text(pages_with_markup):
    """An ``on_item`` check: inert page; counts the pages that show a reply's markup as text
    (attention checks show gold replies only)."""
    from selenium.webdriver.common.by import By

    def check(driver):
        _assert_inert(driver)
        shown = ' '.join(c.text for c in driver.find_elements(By.CLASS_NAME, 'candidate'))
        pages_with_markup.append(any(reply in shown for reply in XSS_REPLIES))

    return check


def test_browser_shows_markup_in_replies_as_text_and_runs_nothing(logs, tmp_path, browser):
    from selenium.webdriver.common.by import By

    evil = _evil_world_log(logs['gold'], str(tmp_path / 'evil.jsonl'))
    likert_db = str(tmp_path / 'likert.db')
    db = build_task(
        likert_db,
        'likert',
        [f'{XSS_MODEL}={evil}'],
        num_items=6,
        annotators=1,
        items_per_assignment=3,
        checks_per_assignment=1,
    )
    server = Server(likert_db).start()
    try:
        link = providers.local_links(db, server.base, 1)[0]
        pages = []
        n, code = _walk(
            browser, link, lambda _page: ['3', '3', '3'], str(tmp_path / 'likert.png'), _replies_shown_as_text(pages)
        )
        assert n == 4 and sum(pages) == 3  # 3 items + 1 check
        _assert_inert(browser)  # the completion page
        assert browser.find_element(By.ID, 'completion-code').text == code

        # the admin page shows the model's name (markup included) as text; the export is a
        # download, never rendered as a page
        browser.execute_cdp_cmd('Network.enable', {})
        browser.execute_cdp_cmd(
            'Network.setExtraHTTPHeaders', {'headers': {'Authorization': f'Bearer {db.config["admin_token"]}'}}
        )
        browser.get(server.base + '/admin')
        assert XSS_MODEL in browser.find_element(By.ID, 'progress-table').text
        _assert_inert(browser)
        browser.find_element(By.ID, 'export').click()
        _assert_inert(browser)
        assert browser.current_url == server.base + '/admin'
        browser.execute_cdp_cmd('Network.setExtraHTTPHeaders', {'headers': {}})
    finally:
        server.kill()

    ab_db = str(tmp_path / 'ab.db')
    db = build_task(
        ab_db,
        'ab',
        ['gold=' + logs['gold'], f'{XSS_MODEL}={evil}'],
        num_items=6,
        annotators=1,
        items_per_assignment=3,
        checks_per_assignment=1,
        seed=3,
    )
    server = Server(ab_db).start()
    try:
        link = providers.local_links(db, server.base, 1)[0]
        pages = []
        n, _code = _walk(browser, link, lambda _page: ['tie'], str(tmp_path / 'ab.png'), _replies_shown_as_text(pages))
        assert n == 4 and sum(pages) == 3
        _assert_inert(browser)
    finally:
        server.kill()
    stored = [json.loads(a) for (a,) in sqlite3.connect(ab_db).execute('SELECT answer FROM answers')]
    assert len(stored) == 4
