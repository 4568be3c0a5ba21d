"""Load a profile in the real speedscope viewer (npm package, in headless Debian Chromium via Playwright).

Success means what a person would see: the page title becomes "<profile name> - speedscope", no alert
dialog appeared ("Unrecognized format!"), and the body does not say "Something went wrong".
"""

from __future__ import annotations

import functools
import http.server
import os
import shutil
import tempfile
import threading
from dataclasses import dataclass

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
VIEWER_DIR = os.path.join(REPO, ".test-deps", "node_modules", "speedscope", "dist", "release")
SCHEMA_PATH = os.path.join(VIEWER_DIR, "file-format-schema.json")
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
# Flags from ../shared/reference/toolbox.md: no network chatter on this closed machine, software WebGL.
CHROMIUM_ARGS = [
    "--no-sandbox", "--disable-gpu", "--enable-unsafe-swiftshader", "--disable-quic",
    "--disable-background-networking", "--disable-component-update", "--no-first-run", "--disable-sync",
]  # fmt: skip


@dataclass
class ViewerResult:
    title: str
    dialogs: list[str]
    body: str
    screenshot: str | None

    @property
    def ok(self) -> bool:
        return (
            self.title.endswith(" - speedscope")
            and not self.dialogs
            and "Something went wrong" not in self.body
        )


def viewer_available() -> str | None:
    """None if the viewer can run here, else why not."""
    if not os.path.exists(os.path.join(VIEWER_DIR, "index.html")):
        return "speedscope is not installed in .test-deps (run scripts/setup-tests.sh)"
    if not os.path.exists(CHROMIUM):
        return "chromium is not installed (run scripts/setup-tests.sh)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "the playwright Python package is not installed (run scripts/setup-tests.sh)"
    return None


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


def load_in_viewer(profile_path: str, screenshot: str | None = None, timeout_ms: int = 20000) -> ViewerResult:
    """Serve the viewer and the profile from one loopback server and load it by #profileURL."""
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory() as root:
        os.symlink(VIEWER_DIR, os.path.join(root, "speedscope"))
        name = os.path.basename(profile_path)
        shutil.copy(profile_path, os.path.join(root, name))
        handler = functools.partial(_QuietHandler, directory=root)
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        port = server.server_address[1]
        url = f"http://127.0.0.1:{port}/speedscope/index.html#profileURL=http://127.0.0.1:{port}/{name}"
        dialogs: list[str] = []
        try:
            with sync_playwright() as p, tempfile.TemporaryDirectory() as profile_dir:
                context = p.chromium.launch_persistent_context(
                    profile_dir, executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS
                )
                try:
                    page = context.new_page()

                    def on_dialog(dialog: object) -> None:
                        dialogs.append(dialog.message)  # type: ignore[attr-defined]
                        dialog.dismiss()  # type: ignore[attr-defined]

                    page.on("dialog", on_dialog)
                    page.goto(url)
                    try:
                        page.wait_for_function(
                            "() => document.title.endsWith(' - speedscope')", timeout=timeout_ms
                        )
                    except Exception:
                        pass
                    page.wait_for_timeout(300)
                    if screenshot:
                        page.screenshot(path=screenshot)
                    return ViewerResult(page.title(), dialogs, page.inner_text("body"), screenshot)
                finally:
                    context.close()
        finally:
            server.shutdown()
            server.server_close()
