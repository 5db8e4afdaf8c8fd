#!/usr/bin/python3
"""The console in headless Chromium against a real sandbox (tests/ui/vm-run).

    vm_browser.py URL SANDBOX SCREENSHOT HOST:VERB...

For each HOST:VERB in turn: waits for SANDBOX's request for HOST to show on
the page and clicks VERB (allow, always, deny) on it.  Saves a screenshot
when the first request shows.  Prints one "ok"/"not ok" line per answer.
UI_READY_FILE: written once the page shows (the guest starts asking only
then: Chromium starts slowly under emulation, and requests time out);
UI_DRIVER_LOG: chromedriver's verbose log.
"""
import os
import sys

from selenium import webdriver
from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.support.ui import WebDriverWait

url, sandbox, shot = sys.argv[1], sys.argv[2], sys.argv[3]
o = webdriver.ChromeOptions()
o.binary_location = "/usr/bin/chromium"
for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
          "--window-size=1200,800", "--no-first-run", "--disable-extensions"):
    o.add_argument(a)
log = os.environ.get("UI_DRIVER_LOG")
d = webdriver.Chrome(service=Service("/usr/bin/chromedriver", log_path=log or os.devnull,
                                     service_args=["--verbose"] if log else []), options=o)
failures = 0
try:
    d.set_page_load_timeout(300)
    d.set_script_timeout(120)
    wait = WebDriverWait(d, 240)
    d.get(url)
    wait.until(lambda x: x.execute_script("return document.body.dataset.loaded === '1'"))
    if os.environ.get("UI_READY_FILE"):
        with open(os.environ["UI_READY_FILE"], "w") as f:
            f.write("ready\n")
    for n, pair in enumerate(sys.argv[4:]):
        host, verb = pair.rsplit(":", 1)
        find = ("for (const li of document.querySelectorAll('#approval-list li')) {"
                " const h = li.querySelector('.host');"
                " if (h && h.textContent === arguments[0] && li.id.startsWith('approval-' + arguments[1] + '-'))"
                "  return li.id.slice(('approval-' + arguments[1] + '-').length); } return null;")
        try:
            rid = wait.until(lambda x: x.execute_script(find, host, sandbox))
        except Exception as e:
            failures += 1
            print("not ok ui-vm-%s-%s: the request never showed (%s)" % (verb, host, type(e).__name__), flush=True)
            continue
        if n == 0 and shot:
            d.save_screenshot(shot)

        def once(x):
            try:
                x.find_element("id", "answer-%s-%s-%s" % (sandbox, rid, verb)).click()
                return True
            except (StaleElementReferenceException, NoSuchElementException):
                return False
        wait.until(once)
        res = wait.until(lambda x: x.execute_script(
            "const r = document.getElementById('answer-result'); "
            "return r && r.textContent.indexOf('request ' + arguments[0] + ' ') >= 0 ? r.textContent : null", rid))
        good = res.endswith(": " + verb)
        failures += 0 if good else 1
        print(("ok" if good else "not ok") + " ui-vm-page-answered-%s-%s%s" % (verb, host, "" if good else ": " + res),
              flush=True)
finally:
    d.quit()
sys.exit(1 if failures else 0)
