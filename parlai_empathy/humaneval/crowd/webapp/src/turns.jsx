// ParlAI's turn-annotation blueprint (TurnAnnotationsStaticBlueprint) with parlai-empathy's page.
// Each subtask is one conversation as the blueprint prepares it ([{text, agent_idx, do_annotate,
// other_metadata}], agent 0 the speaker, agent 1 the listener); the turns to annotate (the
// model's reply) get one checkbox per annotation bucket. The answer has the shape ParlAI's
// compile_results reads: {final_data: [{subtask_index, data: [utterance + {bucket: bool}]}]}.
// During onboarding the initial data is {conversations: [...]} and the server checks the answers.
import { useState } from 'react';
import { useMephistoTask, getBlockedExplanation } from 'mephisto-task';
import { Frame, Status, Turn, mount } from './common.jsx';

const ROLE_OF_AGENT = ['speaker', 'listener'];

function Conversation({ utterances, buckets, question, index, total, onDone }) {
  const keys = Object.keys(buckets);
  const [marks, setMarks] = useState({});
  const toMark = utterances.map((u, i) => (u.do_annotate ? i : -1)).filter((i) => i >= 0);
  const ready = toMark.every((i) => keys.some((k) => marks[`${i}:${k}`]));
  const toggle = (i, k) => setMarks({ ...marks, [`${i}:${k}`]: !marks[`${i}:${k}`] });
  const answer = () => ({
    subtask_index: index,
    data: utterances.map((u, i) => {
      const out = { text: u.text, agent_idx: u.agent_idx, do_annotate: u.do_annotate,
                    other_metadata: u.other_metadata ?? null };
      if (u.do_annotate) for (const k of keys) out[k] = Boolean(marks[`${i}:${k}`]);
      return out;
    }),
  });
  return (
    <div id={`conversation-${index}`}>
      <p className="progress-note" id="progress">Conversation {index + 1} of {total}</p>
      <section className="dialogue mb-3" id="context">
        {utterances.map((u, i) => (
          <div key={i}>
            <Turn role={ROLE_OF_AGENT[u.agent_idx] || 'speaker'} text={u.text} judged={u.do_annotate} />
            {u.do_annotate ? (
              <fieldset className="ms-3 mb-2 annotation" id={`annotate-${i}`}>
                <legend className="h6">{question}</legend>
                {keys.map((k) => (
                  <div className="form-check" key={k}>
                    <input className="form-check-input" type="checkbox" id={`bucket-${i}-${k}`}
                           checked={Boolean(marks[`${i}:${k}`])} onChange={() => toggle(i, k)} />
                    <label className="form-check-label" htmlFor={`bucket-${i}-${k}`}>
                      <b>{buckets[k].name}</b>: {buckets[k].description}
                    </label>
                  </div>
                ))}
              </fieldset>
            ) : null}
          </div>
        ))}
      </section>
      <button className="btn btn-primary" id="next" disabled={!ready} onClick={() => onDone(answer())}>
        {index + 1 === total ? 'Submit' : 'Next'}
      </button>
    </div>
  );
}

// One page for the practice and one for the task: Mephisto swaps the initial data in place after a
// passed practice, and the key gives the task a fresh page state.
function App() {
  const task = useMephistoTask();
  const status = Status({ ...task, getBlockedExplanation });
  if (status) return status;
  return <Body key={task.isOnboarding ? 'practice' : 'task'} task={task} />;
}

function Body({ task }) {
  const [answers, setAnswers] = useState([]);
  const [sent, setSent] = useState(false);
  const config = task.taskConfig;
  const onboarding = task.isOnboarding;
  const subtasks = onboarding ? (task.initialTaskData || {}).conversations || [] : task.initialTaskData || [];
  const buckets = (config.annotation_buckets || {}).config || {};
  if (sent) {
    return (
      <Frame title="Thank you">
        <p id="done">{onboarding ? 'Your practice answers were submitted; the task will load if they qualify you.' : 'Your answers were submitted.'}</p>
      </Frame>
    );
  }
  const done = (answer) => {
    const all = [...answers, answer];
    if (all.length === subtasks.length) {
      setSent(true);
      setAnswers([]);
      task.handleSubmit({ final_data: all });
    } else {
      setAnswers(all);
    }
  };
  const i = answers.length;
  return (
    <Frame title={onboarding ? 'Practice: annotate the reply' : config.task_title || 'Annotate the replies'}>
      <section id="instructions" className="mb-3"><p>{config.task_description}</p></section>
      {onboarding ? <p className="alert alert-info" id="onboarding">Practice first: these answers are checked before the task opens.</p> : null}
      {subtasks.length ? (
        <Conversation key={`${onboarding}-${i}`} utterances={subtasks[i]} buckets={buckets}
                      question={config.annotation_question} index={i} total={subtasks.length} onDone={done} />
      ) : (
        <p className="task-error" id="empty">There is nothing to annotate in this task.</p>
      )}
    </Frame>
  );
}

mount(App);
