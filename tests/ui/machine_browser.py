#!/usr/bin/python3
"""kosa8 ui in headless Chromium on this host, against a real sandbox in
kosa8's helper machine (tests/ui/machine-run sets it all up).

    machine_browser.py URL SANDBOX KOSA8 AUDIT_LOG [SCREENSHOT_DIR]

SANDBOX runs in the machine with the policy `ask ask-yes.test ask-no.test`
and two checkpoints, c1 and c2 under it.  In order:
  - the page shows SANDBOX running and its tree: c2 under c1, running
    from c2;
  - the guest asks for ask-yes.test, then ask-no.test (`kosa8 exec`, with
    curl); each request shows on the page and is answered there: Allow
    once, then Deny;
  - "Fork" on c1 with the name SANDBOX-f makes a fork (kosa8 fork); the
    page shows it running;
  - "Rewind" on c1 puts SANDBOX back there; a checkpoint taken then (by
    the command line, with the id it prints: not c3, since the rewind's
    new disk layer took a number too) shows as c2's sibling, live, and
    the tree says SANDBOX runs from it;
  - a record of AUDIT_LOG changed on disk shows as BROKEN on the page.
Prints one "ok NAME" / "not ok NAME: why" line per check; what the guest
printed goes to GUEST_OUT (an environment variable) for machine-run.
"""
import os
import subprocess
import sys

from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

import uitest
from uitest import click

url, sandbox, kosa8, audit_log = sys.argv[1:5]
shots = sys.argv[5] if len(sys.argv) > 5 else ""


def check(name, good, why=""):
    uitest.check("ui-machine-" + name, good, why)


def js(d, script, *args):
    return d.execute_script(script, *args)


def result(wait, d, id, prefix):
    """The text of status line id once it starts with prefix and is final."""
    return wait.until(lambda x: js(x, "const t = document.getElementById(arguments[0]).textContent;"
                                      "return t.startsWith(arguments[1]) && !t.endsWith('running…') ? t : null",
                                   id, prefix))


def answer(wait, d, host, verb):
    find = ("for (const li of document.querySelectorAll('#approval-list li')) {"
            " const h = li.querySelector('.host');"
            " if (h && h.textContent === arguments[0] && li.id.startsWith('approval-' + arguments[1] + '-'))"
            "  return li.id.slice(('approval-' + arguments[1] + '-').length); } return null;")
    try:
        rid = wait.until(lambda x: js(x, find, host, sandbox))
    except Exception as e:
        check("request-shown-" + host, False, "never showed (%s)" % type(e).__name__)
        return
    check("request-shown-" + host, True)
    if shots and verb == "allow":
        js(d, "window.scrollTo(0, 0)")
        d.save_screenshot(os.path.join(shots, "console-machine-approval.png"))
    click(wait, "answer-%s-%s-%s" % (sandbox, rid, verb))
    res = wait.until(lambda x: js(x, "const r = document.getElementById('answer-result');"
                                     "return r && r.textContent.indexOf('request ' + arguments[0] + ' ') >= 0"
                                     " ? r.textContent : null", rid))
    check("page-answered-%s-%s" % (verb, host), res.endswith(": " + verb), res)


d = uitest.browser(("--window-size=1200,900",))
guest = None
try:
    d.set_page_load_timeout(60)
    wait = WebDriverWait(d, 100)
    d.get(url)
    wait.until(lambda x: js(x, "return document.body.dataset.loaded === '1'"))
    st = wait.until(lambda x: js(x, "const r = document.getElementById('sandbox-' + arguments[0]);"
                                    "return r && r.children[1].textContent === 'running' ? 'running' : null",
                                 sandbox))
    check("sandbox-running-in-machine", st == "running")
    # The tree as drawn: each node's id, its parent node's id, and its mark.
    tree = ("return [...document.querySelectorAll('#tree-' + arguments[0] + ' li.ckpt')].map(li => {"
            " const up = li.parentElement.closest('li.ckpt');"
            " return li.querySelector('.id').textContent + '<' + (up ? up.querySelector('.id').textContent : '')"
            "  + (li.querySelector(':scope > .line > .here') ? '*' : ''); }).join(' ')")
    got = wait.until(lambda x: js(x, tree, sandbox) or None)
    check("tree-drawn", got == "c1< c2<c1*", got)

    # The guest asks; the page answers.
    guest = subprocess.Popen([kosa8, "exec", sandbox, "--", "/workspace/ask.sh"], stdin=subprocess.DEVNULL,
                             stdout=open(os.environ["GUEST_OUT"], "w"), stderr=subprocess.STDOUT)
    answer(wait, d, "ask-yes.test", "allow")
    answer(wait, d, "ask-no.test", "deny")
    guest.wait(timeout=300)
    guest = None

    # A fork from the tree.
    box = d.find_element(By.ID, "fork-name")
    box.clear()
    box.send_keys(sandbox + "-f")
    click(wait, "fork-%s-c1" % sandbox)
    long_wait = WebDriverWait(d, 400)
    res = result(long_wait, d, "checkpoint-result", "fork of")
    check("fork-from-tree", ": done" in res, res)
    running = ("const r = document.getElementById('sandbox-' + arguments[0]);"
               "return r && r.children[1].textContent === 'running'")
    try:
        wait.until(lambda x: js(x, running, sandbox + "-f"))
        check("fork-shown-running", True)
    except Exception as e:
        check("fork-shown-running", False, "%s: %s" % (type(e).__name__, js(
            d, "const r = document.getElementById('sandbox-' + arguments[0]); return r && r.textContent",
            sandbox + "-f")))

    # A rewind from the tree: a confirmation first.
    click(wait, "rewind-%s-c1" % sandbox)
    wait.until(lambda x: x.switch_to.alert).accept()
    res = result(long_wait, d, "checkpoint-result", "rewind of")
    check("rewind-from-tree", ": done" in res, res)
    new = subprocess.run([kosa8, "checkpoint", sandbox, "-m", "after the rewind"], stdin=subprocess.DEVNULL,
                         stdout=subprocess.PIPE, text=True, check=True).stdout.strip()
    want = "c1< c2<c1 %s<c1*" % new
    try:
        got = wait.until(lambda x: (lambda t: t if t == want else None)(js(x, tree, sandbox)))
    except Exception:
        got = js(d, tree, sandbox)
    check("tree-branch-after-rewind", got == want, "%s, wanted %s" % (got, want))
    if shots:
        js(d, "document.getElementById('checkpoints').scrollIntoView()")
        d.save_screenshot(os.path.join(shots, "console-checkpoints.png"))

    # The audit log changed on disk: the page says BROKEN.
    subprocess.run([kosa8, "audit", "sign"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, check=True)
    click(wait, "audit-verify")
    v = long_wait.until(lambda x: js(x, "const v = document.getElementById('audit-verdict').textContent;"
                                        "return v === 'verifying…' ? null : v"))
    check("audit-verified-before", v == "verified", v + ": " + js(d, "return document.getElementById('audit-text')"
                                                                       ".textContent").strip()[:300])
    with open(audit_log, "rb") as f:
        data = f.read()
    at = data.index(b'"ask-no.test"')
    with open(audit_log, "r+b") as f:
        f.seek(at)
        f.write(b'"ask-ok.test"')
    click(wait, "audit-verify")
    v = long_wait.until(lambda x: js(x, "const v = document.getElementById('audit-verdict').textContent;"
                                        "return v === 'verifying…' || v === 'verified' ? null : v"))
    why = js(d, "return document.getElementById('audit-text').textContent")
    check("tampered-audit-shows-broken", v == "BROKEN", v + ": " + why[:300])
finally:
    if guest:
        guest.kill()
    d.quit()
sys.exit(1 if uitest.failures else 0)
