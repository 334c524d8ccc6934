// parlai-empathy's guard in front of Mephisto 1.1.1's node router (its copy under each run folder;
// parlai_empathy/humaneval/crowd/pages.py puts it there). Every request passes here before
// Mephisto's handlers, so that client input gets a 4xx instead of a crash, a 500, a request
// Mephisto never answers, or a file of the machine:
//   * /download_file/<name> sends any file of the machine to anyone (server.js:587-610 serves
//     path.join("/tmp/", name), and an encoded "../" climbs out); our pages download nothing;
//   * /submit_task takes multipart uploads into /tmp/ with no limit (server.js:42-52); our pages
//     upload nothing;
//   * a body without the fields a handler reads throws (500) or reaches Python, which fails on it
//     and never answers the request (server.js:428-447), one pending entry more each time.
"use strict";

const MAX_PENDING = 1000; // requests waiting for Mephisto's answer
const MAX_VALUE = 2048; // characters of one provider_data value

function isObject(value) {
  return value !== null && typeof value === "object" && !Array.isArray(value);
}

function isId(value) {
  return typeof value === "string" && value.length > 0 && value.length <= 256;
}

function isFlat(value) {
  return isObject(value) && Object.values(value).every(
    (v) => v === null || (["string", "number", "boolean"].includes(typeof v) && String(v).length <= MAX_VALUE)
  );
}

function problem(path, body) {
  if (!isObject(body)) return "the body must be a JSON object";
  switch (path) {
    case "/request_agent":
      if (!isFlat(body.provider_data)) return "provider_data must be an object of plain values";
      if (!isId(body.provider_data.worker_name) || !isId(body.provider_data.agent_registration_id))
        return "provider_data needs worker_name and agent_registration_id";
      return null;
    case "/submit_onboarding":
      if (!isObject(body.provider_data) || !isId(body.provider_data.USED_AGENT_ID))
        return "provider_data needs USED_AGENT_ID";
      if (body.provider_data.onboarding_data !== undefined && !isObject(body.provider_data.onboarding_data))
        return "onboarding_data must be an object";
      return null;
    case "/submit_task":
      if (!isId(body.USED_AGENT_ID)) return "USED_AGENT_ID missing";
      if (body.final_string_data !== undefined) {
        try {
          if (!isObject(JSON.parse(body.final_string_data))) return "final_string_data must hold a JSON object";
        } catch (err) {
          return "final_string_data is not JSON";
        }
      } else if (!isObject(body.final_data)) {
        return "final_data must be an object";
      }
      return null;
    case "/submit_metadata":
    case "/log_error":
      return isId(body.USED_AGENT_ID) ? null : "USED_AGENT_ID missing";
    default:
      return null;
  }
}

module.exports = function guard(app, pendingRequests) {
  app.use(function (req, res, next) {
    if (req.path.startsWith("/download_file")) return res.status(404).end();
    if (req.method !== "POST") return next();
    if (req.is("multipart/form-data")) return res.status(415).json({ status: "refused", reason: "no uploads" });
    const reason = problem(req.path, req.body);
    if (reason) return res.status(400).json({ status: "refused", reason: reason });
    if ((req.path === "/request_agent" || req.path === "/submit_onboarding") && pendingRequests() >= MAX_PENDING)
      return res.status(429).json({ status: "refused", reason: "too many requests waiting; try again shortly" });
    return next();
  });
};
