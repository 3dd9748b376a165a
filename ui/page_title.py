"""The browser tab's title follows the run the Train tab shows: "6/11 ▶ 3 min left · GRPO Studio" while it trains (the
header's ETA, in whole minutes), "✓ Finished · GRPO Studio" once it is done. Someone who pressed Start and went to
another tab, or chats on the Chat tab, sees from the tab strip how far the run is and when it has ended. The
header's *Notify me* (ui/views.py) asks for a browser notification as well: once allowed, a run that ends while the
page is out of sight says so on the desktop (a failed one with the header's error). The choice is the browser's,
kept in its storage for every run until *Notify me* is pressed again.

The title is read from the run header (ui/views.py: progress_html's data-state, data-step, data-total and
data-run), which the page's poll keeps drawing while the Train tab is out of sight (ui/watch.py: a background
part), every few seconds. No Gradio event and no request of its own: a watcher on the header element."""

from __future__ import annotations

import json

from pipeline.run_folder.jobstate import ACTIVE_STATES

# The title for each state the header can show; running and queued (ACTIVE_STATES) show the step instead.
ENDED = {"finished": "✓ Finished", "stopped": "■ Stopped", "failed": "✗ Failed", "damaged": "✗ Damaged"}
NOTIFY_KEY = "gs-notify"  # the browser's storage: "1" while this browser wants a notification when a run ends
NOTIFY_TIP = "A browser notification when this run ends, while this page is out of sight"  # *Notify me*'s hover

TITLE_JS = """() => {
  if (window.gsTitle) return;
  const base = document.title || 'GRPO Studio';
  const ended = %(ended)s, active = %(active)s, key = %(key)s, offTip = %(tip)s;
  const under = (state) => active.includes(state);
  // The header's ETA ("2m25s", "1h05m") to the nearest minute, so the title changes once a minute, not every second.
  const minutes = (text) => {
    const hours = /^(\\d+)h(\\d+)m$/.exec(text), mins = /^(\\d+)m(\\d+)s$/.exec(text);
    if (hours) return `${hours[1]}h${hours[2]}m left · `;
    if (!mins) return '';
    const seconds = 60 * Number(mins[1]) + Number(mins[2]);
    return seconds < 60 ? '<1 min left · ' : `${Math.round(seconds / 60)} min left · `;
  };
  const title = (run) => {
    if (!run) return base;
    const {state, step, total} = run.dataset;
    if (state === 'queued' && step === '0') return `Queued · ${base}`;
    const left = run.querySelector('.gs-left');
    if (under(state)) return `${step}/${total || '?'} ▶ ${left ? minutes(left.textContent.trim()) : ''}${base}`;
    return ended[state] ? `${ended[state]} · ${base}` : base;
  };
  // Notifications: only in a secure page (https, or the app on this machine), once the browser allows them.
  const can = () => window.isSecureContext && 'Notification' in window;
  const wanted = () => can() && Notification.permission === 'granted' && localStorage.getItem(key) === '1';
  const away = () => {
    const header = document.getElementById('progress');
    return document.hidden || !document.hasFocus() || !header || header.offsetParent === null;
  };
  const notify = (head, body) => {
    if (!wanted() || !away()) return;
    try {
      const note = new Notification(head, {body, tag: 'grpo-studio'});
      note.onclick = () => { window.focus(); note.close(); };
    } catch (err) { /* a browser that takes notifications from its service worker only */ }
  };
  // A failed run's notification starts with the header's error, shortened: what went wrong, not only that it did.
  const problem = (run) => {
    const box = run.querySelector('.gs-error');
    const text = box ? box.textContent.replace(/^\s*[^:]{1,30}:\s*/, '').replace(/\s+/g, ' ').trim() : '';
    const cut = text.length > 120 ? `${text.slice(0, 119)}…` : text;
    return !cut ? '' : cut + (/[.!?…]$/.test(cut) ? ' ' : '. ');
  };
  const bell = () => {  // the bell says whether a notification will come
    const button = document.querySelector('#progress .gs-notify');
    if (!button) return;
    if (!can()) { if (!button.hidden) button.hidden = true; return; }
    const blocked = Notification.permission === 'denied';
    const label = blocked ? 'Notifications blocked' : wanted() ? '✓ Notifying' : 'Notify me';
    const tip = blocked ? "The browser blocks this page's notifications: allow them in its site settings."
      : wanted() ? 'A notification comes when a run ends while this page is out of sight. Press to stop them.'
      : offTip;
    if (button.textContent !== label) button.textContent = label;
    if (button.title !== tip) button.title = tip;
    if (button.classList.contains('gs-notify-on') !== wanted()) button.classList.toggle('gs-notify-on');
  };
  let last = null;
  const update = () => {
    const run = document.querySelector('#progress .gs-progress');
    const next = title(run);
    if (document.title !== next) document.title = next;
    bell();
    if (!run) { last = null; return; }
    const {state, step, total} = run.dataset, name = run.dataset.run;
    if (last && under(last.state) && last.run === name && ended[state]) {
      notify(`${ended[state]}: ${name}`, `${problem(run)}Step ${step} of ${total}. GRPO Studio`);
    } else if (last && under(last.state) && last.run !== name) {  // the queue moved the page on
      notify(`${last.run} has ended`, `The queue started ${name}. GRPO Studio`);
    }
    last = {run: name, state};
  };
  document.addEventListener('click', async (event) => {
    if (!event.target.closest || !event.target.closest('#progress .gs-notify') || !can()) return;
    if (wanted()) localStorage.setItem(key, '0');
    else if (Notification.permission !== 'denied') {
      const answer = Notification.permission === 'granted' ? 'granted' : await Notification.requestPermission();
      localStorage.setItem(key, answer === 'granted' ? '1' : '0');
    }
    bell();
  });
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
    """The page script that keeps the tab's title on the shown run's state, and notifies when it ends.

    >>> "✓ Finished" in title_js() and "%(" not in title_js() and '"gs-notify"' in title_js()
    True
    """
    return TITLE_JS % {"ended": json.dumps(ENDED, ensure_ascii=False), "active": json.dumps(ACTIVE_STATES),
                       "key": json.dumps(NOTIFY_KEY), "tip": json.dumps(NOTIFY_TIP)}
