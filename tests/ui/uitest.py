"""What the console's browser tests share (tests/ui/browser_test.py,
tests/ui/machine_browser.py): headless Chromium through python3-selenium,
"ok NAME" / "not ok NAME: why" lines, a click that survives the page's
redraws."""
from selenium import webdriver
from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By

failures = 0


def check(name, good, why=""):
    global failures
    if good:
        print("ok " + name, flush=True)
    else:
        failures += 1
        print("not ok " + name + ": " + why, flush=True)


def browser(extra=()):
    o = webdriver.ChromeOptions()
    o.binary_location = "/usr/bin/chromium"
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
              "--window-size=1200,800", "--no-first-run", "--disable-extensions", *extra):
        o.add_argument(a)
    return webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=o)


def click(wait, id):
    """A real click on element id, again if a redraw replaced it meanwhile."""
    def once(x):
        try:
            x.find_element(By.ID, id).click()
            return True
        except (StaleElementReferenceException, NoSuchElementException):
            return False
    wait.until(once)
