// ParlAI's ACUTE-Eval blueprint (AcuteEvalBlueprint) with parlai-empathy's page: each subtask is
// one ED context and two listeners' replies to it. ACUTE's runner sends the subtasks as the
// initial task data ({task_specs: {question, s1_choice, s2_choice, model_left, model_right,
// is_onboarding}, pairing_dict, pair_id}) and reads back {final_data: [{speakerChoice,
// textReason}]}, speakerChoice being the chosen side's name, which this page never shows.
import { useState } from 'react';
import { useMephistoTask, getBlockedExplanation } from 'mephisto-task';
import { Frame, Status, Turn, Turns, mount, MIN_REASON } from './common.jsx';

const SIDES = ['A', 'B'];

// The role of a turn of an ACUTE dialogue: the ED data's own ids, else the side being judged is
// the listener and everybody else the speaker.
function role(turnId, judged) {
  if (turnId === 'human_speaker') return 'speaker';
  if (turnId === 'human_listener' || turnId === judged) return 'listener';
  return 'speaker';
}

function shown(dialogue, judged) {
  return dialogue.map((t) => ({ role: role(t.id, judged), text: t.text, judgedId: t.id }));
}

// The turns both dialogues share (the conversation so far), shown once, then what differs.
function split(left, right) {
  let n = 0;
  while (n < left.length && n < right.length && left[n].text === right[n].text &&
         left[n].role === right[n].role && left[n].judgedId === right[n].judgedId) n += 1;
  return [left.slice(0, n), left.slice(n), right.slice(n)];
}

function Choice({ specs, index, total, onDone }) {
  const [choice, setChoice] = useState(null);
  const [reason, setReason] = useState('');
  const names = [specs.model_left.name, specs.model_right.name];
  const left = shown(specs.model_left.dialogue, names[0]);
  const right = shown(specs.model_right.dialogue, names[1]);
  const [shared, restLeft, restRight] = split(left, right);
  const label = (text) => text.replace('<Speaker 1>', 'Listener A').replace('<Speaker 2>', 'Listener B');
  const ready = choice !== null && reason.trim().length >= MIN_REASON;
  const rest = [restLeft, restRight];
  return (
    <div id={`comparison-${index}`}>
      <p className="progress-note" id="progress">Comparison {index + 1} of {total}</p>
      <section className="dialogue mb-3" id="context">
        <h2 className="h5">Conversation</h2>
        <Turns turns={shared} />
      </section>
      <div className="row g-3 mb-3">
        {SIDES.map((side, i) => (
          <div className="col-md-6" key={side}>
            <div className="candidate pt-2" id={`cand-${i}`}>
              {rest[i].map((t, k) => (
                <Turn key={k} role={t.role} text={t.text} judged={k === rest[i].length - 1}
                      label={t.role === 'listener' ? `Listener ${side}` : undefined} />
              ))}
            </div>
          </div>
        ))}
      </div>
      <fieldset className="mb-3">
        <legend className="h6" id="question">{label(specs.question)}</legend>
        {[specs.s1_choice, specs.s2_choice].map((text, i) => (
          <div className="form-check" key={i}>
            <input className="form-check-input" type="radio" name={`choice-${index}`} id={`choice-${SIDES[i]}`}
                   checked={choice === i} onChange={() => setChoice(i)} />
            <label className="form-check-label" htmlFor={`choice-${SIDES[i]}`}>{label(text)}</label>
          </div>
        ))}
      </fieldset>
      <div className="mb-3">
        <label className="form-label" htmlFor="reason">Why? (a few words)</label>
        <input className="form-control" id="reason" value={reason} maxLength={500}
               onChange={(e) => setReason(e.target.value)} />
      </div>
      <button className="btn btn-primary" id="next" disabled={!ready}
              onClick={() => onDone({ speakerChoice: names[choice], textReason: reason.trim() })}>
        {index + 1 === total ? 'Submit' : 'Next'}
      </button>
    </div>
  );
}

function App() {
  const task = useMephistoTask();
  const [answers, setAnswers] = useState([]);
  const [sent, setSent] = useState(false);
  const status = Status({ ...task, getBlockedExplanation });
  if (status) return status;
  const subtasks = task.initialTaskData || [];
  const config = task.taskConfig;
  if (sent) {
    return <Frame title="Thank you"><p id="done">Your answers were submitted.</p></Frame>;
  }
  const done = (answer) => {
    const all = [...answers, answer];
    if (all.length === subtasks.length) {
      setSent(true);
      task.handleSubmit({ final_data: all });
    } else {
      setAnswers(all);
    }
  };
  const i = answers.length;
  return (
    <Frame title="Which listener responds better?">
      <section id="instructions" className="mb-3">
        <p>{config.task_description}</p>
        {config.additional_task_description ? <p>{config.additional_task_description}</p> : null}
      </section>
      {subtasks.length ? (
        <Choice key={i} specs={subtasks[i].task_specs} index={i} total={subtasks.length} onDone={done} />
      ) : (
        <p className="task-error" id="empty">There is nothing left to compare in this task.</p>
      )}
    </Frame>
  );
}

mount(App);
