"""The browser tab's title follows the run the Train tab shows: "6/11 ▶ GRPO Studio" while it trains, "✓ Finished
· GRPO Studio" once it is done. Someone who pressed Start and went to another tab, or chats on the Chat tab,
sees from the tab strip how far the run is and when it has ended.

The title is read from the run header (ui/views.py: progress_html's data-state, data-step and data-total), which
the page's poll keeps drawing while the Train tab is out of sight (ui/watch.py: a background part), every few
seconds. No Gradio event and no request of its own: a watcher on the header element."""

from __future__ import annotations

# The title for each state the header can show; running and queued show the step instead.
ENDED = {"finished": "✓ Finished", "stopped": "■ Stopped", "failed": "✗ Failed", "damaged": "✗ Damaged"}

TITLE_JS = """() => {
  if (window.gsTitle) return;
  const base = document.title || 'GRPO Studio';
  const ended = %(ended)s;
  const title = () => {
    const run = document.querySelector('#progress .gs-progress');
    if (!run) return base;
    const {state, step, total} = run.dataset;
    if (state === 'queued' && step === '0') return `Queued · ${base}`;
    if (state === 'running' || state === 'queued') return `${step}/${total || '?'} ▶ ${base}`;
    return ended[state] ? `${ended[state]} · ${base}` : base;
  };
  const update = () => { const next = title(); if (document.title !== next) document.title = next; };
  const watch = () => {
    const header = document.getElementById('progress');
    if (!header) { setTimeout(watch, 500); return; }
    window.gsTitle = new MutationObserver(update);
    window.gsTitle.observe(header, {childList: true, subtree: true, attributes: true});
    update();
  };
  watch();
}"""


def title_js() -> str:
    """The page script that keeps the tab's title on the shown run's state.

    >>> "✓ Finished" in title_js() and "%(" not in title_js()
    True
    """
    import json

    return TITLE_JS % {"ended": json.dumps(ENDED, ensure_ascii=False)}
