#!/usr/bin/python3
"""kosa8 ui in headless Chromium (Debian's chromium and chromedriver,
driven by python3-selenium).

    browser_test.py URL PORT ANSWERS_FILE ATTACK_PORT [SCREENSHOT_DIR]

URL is what `kosa8 ui` printed; a sandbox "sb" is served by
tests/ui/ask_supervisor, which asks for api.openai.com.evil.example, then
for registry.npmjs.org, and writes each answer to ANSWERS_FILE.  The page
must show the sandbox, show the first request with its registered domain
(evil.example) set apart, and answer it "deny" by a click; the second
"allow".  An attack page on another port of 127.0.0.1 (same site: the
SameSite=Strict cookie goes along) posts an answer without the CSRF token
and must change nothing; a fresh browser without the token, and one that
reaches the console through a rebinding name, get 403 and no page.  A
page opened on the egress timeline shows a net.connect record written
afterwards (UI_KOSA8 audit append) without a reload.
Prints one "ok NAME" / "not ok NAME: why" line per check.
"""
import os
import subprocess
import sys
import time

import uitest

from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

url, port, answers, attack_port = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
shots = sys.argv[5] if len(sys.argv) > 5 else ""


def check(name, good, why=""):
    uitest.check("ui-" + name, good, why)


def browser(extra=()):
    return uitest.browser(("--host-resolver-rules=MAP rebind.test 127.0.0.1", *extra))


def text(d, wait, css):
    """The text of the first element matching css, once there (the page
    redraws every second: read it in one go, in the page)."""
    return wait.until(lambda x: x.execute_script(
        "const e = document.querySelector(arguments[0]); return e ? e.textContent : null", css))


def answered(n, timeout=30):
    """The first n lines of ANSWERS_FILE, waiting up to timeout seconds."""
    end = time.time() + timeout
    while time.time() < end:
        with open(answers) as f:
            lines = [line.split() for line in f if line.strip()]
        if len(lines) >= n:
            return lines
        time.sleep(0.2)
    return lines


d = browser()
try:
    d.set_page_load_timeout(60)
    wait = WebDriverWait(d, 60)
    d.get(url)
    check("token-url-leaves-address-bar", d.current_url.rstrip("/") == "http://127.0.0.1:" + port,
          "address is " + d.current_url)
    row = text(d, wait, "#sandbox-sb")
    check("shows-sandbox", "sb" in row and "running" in row, "row: " + row)
    reg = text(d, wait, "#approval-sb-1 .host .reg")
    sub = text(d, wait, "#approval-sb-1 .host .sub")
    check("registered-domain-apart", reg == "evil.example" and sub == "api.openai.com.",
          "reg %r sub %r" % (reg, sub))
    if shots:
        d.save_screenshot(os.path.join(shots, "console-approvals.png"))

    # The audit view: verify's verdict, the records, the filter; then a
    # record's bytes changed on disk and verified again: broken.
    check("audit-verified", wait.until(lambda x: x.execute_script(
        "const v = document.getElementById('audit-verdict').textContent;"
        "return v === 'verifying…' ? null : v")) == "verified", "verdict not 'verified'")
    rows = text(d, wait, "#audit-rows")
    check("audit-records-shown", "test.note" in rows and "test.other" in rows, rows[:200])
    egress = d.execute_script(
        "return [...document.querySelectorAll('#egress-rows tr')].map(t => t.className + '|' + t.textContent)")
    check("egress-timeline", len(egress) == 2 and egress[0].startswith("denied|") and "exfil.example:443" in egress[0]
          and egress[1].startswith("|") and "pypi.org:443" in egress[1] and "1.2 KiB" in egress[1]
          and "555 KiB" in egress[1], repr(egress))
    if shots:
        d.execute_script("document.getElementById('egress').scrollIntoView()")
        d.save_screenshot(os.path.join(shots, "console-egress.png"))

    # A page opened on the egress timeline follows it: a record written
    # afterwards (as the proxy writes one) shows without a reload.
    d.get("http://127.0.0.1:%s/#egress" % port)
    wait.until(lambda x: x.execute_script(
        "return document.body.dataset.loaded === '1' && document.getElementById('live').textContent === 'live'"))
    wait.until(lambda x: x.execute_script("return document.querySelectorAll('#egress-rows tr').length") == 2)
    wait.until(lambda x: x.execute_script("return document.getElementById('audit-verdict').textContent") == "verified")
    d.execute_script("window.kosa8SamePage = 1")
    subprocess.run([os.environ["UI_KOSA8"], "audit", "append", "--type", "net.connect", "--sandbox", "sb", "--details",
                    '{"name":"late.example","port":443,"decision":"allow","protocol":"tls","bytes_up":10,'
                    '"bytes_down":20,"duration_ms":5}'], check=True, stdout=subprocess.DEVNULL)
    late = ""
    end = time.time() + 15
    while time.time() < end and "late.example:443" not in late:
        time.sleep(0.2)
        late = d.execute_script("return document.querySelector('#egress-rows tr')?.textContent || ''")
    same = d.execute_script("return window.kosa8SamePage === 1")
    check("egress-live", "late.example:443" in late and same, "newest row %r, same page %s" % (late, same))

    box = d.find_element(By.ID, "audit-filter")
    box.send_keys("test.note")
    rows = d.execute_script("return document.getElementById('audit-rows').textContent")
    check("audit-filter", "test.note" in rows and "test.other" not in rows, rows[:200])
    box.clear()
    log = os.environ["UI_AUDIT_LOG"]
    with open(log, "rb") as f:
        data = f.read()
    with open(log, "r+b") as f:
        f.seek(data.index(b'"step":1'))
        f.write(b'"step":7')
    uitest.click(wait, "audit-verify")
    verdict = wait.until(lambda x: x.execute_script(
        "const v = document.getElementById('audit-verdict').textContent;"
        "return v === 'verifying…' || v === 'verified' ? null : v"))
    why = d.execute_script("return document.getElementById('audit-text').textContent")
    check("audit-tampered-shows-broken", verdict == "BROKEN" and "FAILED" in why, verdict + ": " + why[:200])
    if shots:
        d.execute_script("document.getElementById('audit').scrollIntoView()")
        d.save_screenshot(os.path.join(shots, "console-audit.png"))
    d.execute_script("window.scrollTo(0, 0)")

    # Another local page (same site, other port) posts an answer: the
    # cookie goes with it, the Origin and the CSRF token do not match.
    # In a tab of the same browser, which holds the console's cookie.
    console_tab = d.current_window_handle
    d.switch_to.new_window("tab")
    d.get("http://127.0.0.1:%s/attack.html#%s" % (attack_port, port))
    wait.until(lambda x: x.execute_script("return window.attackDone === true"))
    d.close()
    d.switch_to.window(console_tab)
    time.sleep(1)
    check("csrf-from-other-local-page-refused", len(answered(1, 2)) == 0 and
          d.find_elements(By.ID, "approval-sb-1"), "the attack page answered the request")

    uitest.click(wait, "answer-sb-1-deny")
    got = answered(1)
    check("deny-from-page", got[:1] and got[0][:2] == ["api.openai.com.evil.example", "deny"],
          "supervisor got %r" % got)
    check("live-update-shows-next-request", "registry.npmjs.org" in text(d, wait, "#approval-sb-2"), "")
    uitest.click(wait, "answer-sb-2-allow")
    got = answered(2)
    check("allow-from-page", len(got) >= 2 and got[1][:2] == ["registry.npmjs.org", "allow"],
          "supervisor got %r" % got)
finally:
    d.quit()

# Without the token; through a name that points at 127.0.0.1 (rebinding).
d = browser()
try:
    d.get("http://127.0.0.1:%s/" % port)
    src = d.page_source
    check("no-token-refused", "kosa8" not in src and "sandbox" not in src.lower(), src[:200])
    d.get(url.replace("127.0.0.1", "rebind.test"))
    src = d.page_source
    check("rebinding-host-refused", "kosa8" not in src and "sandbox" not in src.lower(), src[:200])
finally:
    d.quit()
sys.exit(1 if uitest.failures else 0)
