// What both task pages share: the page frame, Bootstrap and our styles, and one conversation
// shown the way parlai-empathy's own rating pages show it (every turn once, in order, with its
// role), so a rater sees the same thing on Mephisto as on our own server.
import { createRoot } from 'react-dom/client';
import bootstrapCss from 'bootstrap/dist/css/bootstrap.min.css';
import ownCss from './style.css';

export const ROLE_NAMES = { speaker: 'Speaker', listener: 'Listener' };

export function mount(App) {
  for (const css of [bootstrapCss, ownCss]) {
    const style = document.createElement('style');
    style.textContent = css;
    document.head.appendChild(style);
  }
  createRoot(document.getElementById('app')).render(<App />);
}

export function Turn({ role, text, judged, label }) {
  const cls = `turn ${role}${judged ? ' judged' : ''}`;
  return (
    <div className={cls} data-role={role}>
      <span className="who">{label || ROLE_NAMES[role] || role}:</span>
      <span className="text">{text}</span>
    </div>
  );
}

export function Turns({ turns }) {
  return turns.map((t, i) => <Turn key={i} {...t} />);
}

export function Frame({ title, children }) {
  return (
    <main className="task container">
      {title ? <h1 className="h3 mb-3">{title}</h1> : null}
      {children}
    </main>
  );
}

// Mephisto answers a worker it gives no unit (a failed practice, no work left) with this code.
const BLOCKED = {
  null_agent_id: 'There is no work for you in this task: either its practice did not qualify you, '
    + 'or every conversation already has its answers. Thank you for your interest.',
};

export function Status({ isLoading, isPreview, blockedReason, taskConfig, getBlockedExplanation }) {
  if (blockedReason !== null && blockedReason !== undefined) {
    return (
      <Frame title="This task is not available to you">
        <p className="task-error" id="blocked">{BLOCKED[blockedReason] || getBlockedExplanation(blockedReason)}</p>
      </Frame>
    );
  }
  if (isLoading || !taskConfig) {
    return <Frame><p id="loading">Loading the task…</p></Frame>;
  }
  if (isPreview) {
    return (
      <Frame title={taskConfig.task_title || 'Rate replies in conversations'}>
        <p id="preview">Accept the task to see the conversations.</p>
      </Frame>
    );
  }
  return null;
}

// How many characters a written reason needs: a word or two, so that an empty click is refused.
export const MIN_REASON = 5;
