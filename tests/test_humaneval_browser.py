"""A real headless Chromium walks one worker through a Likert and an A/B assignment.

Needs Debian's ``chromium`` and ``chromium-driver`` and selenium from PyPI; skips (with the
reason) only when Chromium itself is absent.
"""
import json
import os
import shutil
import sqlite3
import tempfile

import pytest

from humaneval_helpers import Server, cached_world_logs
from parlai_empathy.humaneval import providers
from parlai_empathy.humaneval.build import build_task

CHROMIUM = shutil.which('chromium') or shutil.which('chromium-browser')
CHROMEDRIVER = shutil.which('chromedriver') or '/usr/bin/chromedriver'
SHOTS = {mode: os.path.join(tempfile.gettempdir(), f'parlai_empathy_humaneval_{mode}.png')
         for mode in ('likert', 'ab')}

pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason='chromium not installed (apt-get install chromium chromium-driver)')


@pytest.fixture(scope='module')
def logs(tmp_path_factory):
    return cached_world_logs(tmp_path_factory)


@pytest.fixture()
def browser(tmp_path):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for flag in ('--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking',
                 '--disable-component-update', '--disable-sync', '--no-first-run',
                 '--disable-dev-shm-usage', f'--user-data-dir={tmp_path / "profile"}',
                 '--window-size=1000,1100'):
        opts.add_argument(flag)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)
    driver.set_page_load_timeout(60)
    yield driver
    driver.quit()


def _walk(driver, link, choose, screenshot):
    """Open the link, read instructions, answer every item with ``choose(page_text)`` -> values
    (one per question, in order); return the completion code shown at the end."""
    from selenium.webdriver.common.by import By
    from selenium.common.exceptions import WebDriverException
    from selenium.webdriver.support.wait import WebDriverWait

    def click_and_wait(element_id):
        # wait for the next page to replace this one before looking at it
        old = driver.find_element(By.TAG_NAME, 'main')
        driver.find_element(By.ID, element_id).click()

        def replaced(_):
            # the old page is gone; chromedriver reports that either as a stale element or as
            # "node does not belong to the document" (the latter escapes staleness_of)
            try:
                old.is_enabled()
                return False
            except WebDriverException:
                return True

        WebDriverWait(driver, 30).until(replaced)

    driver.get(link)
    assert driver.find_element(By.ID, 'instructions').is_displayed()
    click_and_wait('start')
    seen = 0
    while driver.find_elements(By.ID, 'answer-form'):
        seen += 1
        if seen == 2:  # a mid-assignment reload shows the same item again
            before = driver.find_element(By.NAME, 'slot').get_attribute('value')
            driver.refresh()
            assert driver.find_element(By.NAME, 'slot').get_attribute('value') == before
            driver.save_screenshot(screenshot)
        fieldsets = driver.find_elements(By.TAG_NAME, 'fieldset')
        for fieldset, value in zip(fieldsets, choose(driver.page_source)):
            fieldset.find_element(By.CSS_SELECTOR, f'input[value="{value}"]').click()
        click_and_wait('next')
    return seen, driver.find_element(By.ID, 'completion-code').text


def test_browser_likert_and_ab_assignments(logs, tmp_path, browser):
    for path in SHOTS.values():
        if os.path.exists(path):
            os.remove(path)
    likert_db = str(tmp_path / 'likert.db')
    db = build_task(likert_db, 'likert', ['gold=' + logs['gold'], 'echo=' + logs['echo']],
                    per_emotion=1, annotators=1, items_per_assignment=4, checks_per_assignment=1)
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
    assert con.execute('SELECT check_passed FROM answers WHERE check_passed IS NOT NULL'
                       ).fetchall() == [(1,)]

    ab_db = str(tmp_path / 'ab.db')
    db = build_task(ab_db, 'ab', ['gold=' + logs['gold'], 'echo=' + logs['echo']], num_items=8,
                    annotators=1, items_per_assignment=4, checks_per_assignment=1, seed=7)
    server = Server(ab_db).start()
    try:
        link = providers.local_links(db, server.base, 1)[0]
        n, code = _walk(browser, link, lambda _page: ['A'], SHOTS['ab'])
        assert n == 5
    finally:
        server.kill()
    con = sqlite3.connect(ab_db)
    rows = con.execute('SELECT a.answer, u.models FROM answers a JOIN units u USING (unit_id) '
                       'ORDER BY a.answer_id').fetchall()
    assert len(rows) == 5
    for answer, models in rows:  # side A always -> the model shown first wins
        assert json.loads(answer)['winners'] == {'overall': json.loads(models)[0]}
    assert con.execute('SELECT completed IS NOT NULL, completion_code FROM assignments'
                       ).fetchone() == (1, code)
    assert all(os.path.getsize(path) > 10_000 for path in SHOTS.values())
