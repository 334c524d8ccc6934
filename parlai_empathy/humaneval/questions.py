"""The wording every human-evaluation task shows, in one place: our own rating pages (Likert and
A/B), ParlAI's ACUTE-Eval and its turn-annotation task on Mephisto. Change a question here and
both paths ask the same thing.
"""

# Rashkin et al. (2019), Section 5: the three questions, rated 1 (not at all) .. 5 (very much);
# 'overall' is the A/B question of MIME and ETHREED's human evaluations.
QUESTIONS = {
    'empathy': (
        'Empathy/Sympathy',
        'Did the responses show understanding of the feelings of the person talking about their experience?',
    ),
    'relevance': ('Relevance', 'Did the responses seem appropriate to the conversation? Were they on-topic?'),
    'fluency': ('Fluency', 'Could you understand the responses? Did the language seem accurate?'),
    'overall': (
        'Overall',
        'Which response is better, considering whether it shows understanding '
        'of the feelings of the person, fits the conversation, and is fluent?',
    ),
}

# ACUTE-Eval asks one question per run (its analysis refuses mixed questions), as a choice
# between two listeners: (eval_question, s1_choice, s2_choice); ACUTE's page puts the sides'
# labels where <Speaker 1> and <Speaker 2> stand.
ACUTE_QUESTIONS = {
    'empathy': (
        "Which listener understands the speaker's feelings better?",
        '<Speaker 1> understands the feelings better',
        '<Speaker 2> understands the feelings better',
    ),
    'relevance': (
        'Which reply fits the conversation better?',
        "<Speaker 1>'s reply fits better",
        "<Speaker 2>'s reply fits better",
    ),
    'fluency': (
        'Which reply is easier to understand and better written?',
        "<Speaker 1>'s reply is better written",
        "<Speaker 2>'s reply is better written",
    ),
    'overall': (
        'Which listener would you rather talk to about a personal experience?',
        'I would rather talk to <Speaker 1>',
        'I would rather talk to <Speaker 2>',
    ),
}
ACUTE_DESCRIPTION = (
    'You will read short conversations in which a person (the Speaker) talks about a personal '
    'experience, each followed by two possible replies from two listeners, A and B. For each '
    'conversation, answer the question by picking one listener, and say in a few words why. '
    'Some conversations check attention: one of their replies belongs to another conversation.'
)

# The turn-annotation task: one checkbox per aspect for the reply being judged ("none" makes a
# reply that has none of them an explicit answer rather than a skipped one).
TURN_QUESTION = 'Which of these describe the highlighted reply? (check all that apply)'
TURN_BUCKETS = {
    'empathy': ('Empathetic', "shows understanding of the Speaker's feelings"),
    'relevance': ('Relevant', 'fits the conversation and stays on topic'),
    'fluency': ('Fluent', 'easy to understand, the language seems accurate'),
    'none': ('None of these', 'none of the descriptions above fits the reply'),
}
TURN_TITLE = "Annotate listeners' replies"
TURN_DESCRIPTION = (
    'You will read short conversations in which a person (the Speaker) talks about a personal '
    'experience to a Listener. The highlighted reply is the one to annotate: tick every '
    'description that fits it. A short practice comes first.'
)
