"""Fluency: a 1-5 rubric judge of every literal continuation and story (CopyBench's Figure 9).

The paper rates the fluency of the outputs of both copying modes with Prometheus-v2
(``prometheus-eval/prometheus-7b-v2.0``; Kim et al., 2024) and a five-point rubric after Fu et al.
(2023), and reports the mean per mode beside the copying rates (its Tables 2, 4 and 5). The
reference code (``scripts/eval_fluency.py``) sends Prometheus's absolute-grading prompt with an
empty instruction, the output as the response and the rubric below, and reads the integer after
``[RESULT]``.

Here the judge is a role (``probes.copybench.fluency_judge.model``): Prometheus by hub id through
the HF backend for real runs, or any configured model (API, served, local). Decoding is greedy
by default (Prometheus's own library samples at temperature 1.0; ``temperature`` > 0 does the
same, and then an unusable reply is asked again, up to ``max_attempts`` samples).

Fixed from the paper: Figure 9's task description announces "a reference answer that gets a score
of 5", but no reference answer follows (the reference code fills the template that has one with
nothing). A judge told to compare with a reference it never sees is being misled, so the prompt
here is Prometheus's *reference-free* absolute-grading prompt, which is Figure 9 without that
phrase (and whose format line, "Feedback: ... [RESULT] ...", Figure 9 already prints).

Every output gets a row: its score (1-5), or none with the reason (``invalid``: the reply has no
``[RESULT]`` followed by an integer from 1 to 5; ``empty``: there was no output to rate; ``error``:
the judge's request failed), the judge's feedback and the attempts. Nothing is dropped: means are
over the rated outputs, and the counts of the rest stand beside them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Sequence

from memaudit.backends.base import STATUS_OK, STATUS_REFUSAL, GenerationParams, generate_batched_if_greedy

SYSTEM_PROMPT = ("You are a fair judge assistant tasked with providing clear, objective feedback based on specific "
                 "criteria, ensuring each assessment reflects the absolute standards set for performance.")
RUBRIC = {  # Figure 9 / scripts/eval_fluency.py
    "criteria": "Evaluate whether the given text is well-written and grammatical.",
    1: "The response is completely unclear, making comprehension difficult.",
    2: "The response has significant areas of ambiguity or disorganization, critically affecting reader "
       "comprehension.",
    3: "The response contains some unclear components, or its organization could be improved.",
    4: "The response is generally understandable but could be further optimized for readability.",
    5: "The response is clear and well-organized, enabling the reader to effortlessly follow the content.",
}
PROMPT = (
    "###Task Description:\n"
    "An instruction (might include an Input inside it), a response to evaluate, and a score rubric representing "
    "a evaluation criteria are given.\n"
    "1. Write a detailed feedback that assess the quality of the response strictly based on the given score "
    "rubric, not evaluating in general.\n"
    "2. After writing a feedback, write a score that is an integer between 1 and 5. You should refer to the "
    "score rubric.\n"
    "3. The output format should look as follows: \"Feedback: (write a feedback for criteria) [RESULT] (an "
    "integer number between 1 and 5)\"\n"
    "4. Please do not generate any other opening, closing, and explanations.\n\n"
    "###The instruction to evaluate:\n{instruction}\n\n"
    "###Response to evaluate:\n{response}\n\n"
    "###Score Rubrics:\n{rubric}\n\n"
    "###Feedback: "
)
_RESULT = re.compile(r"\[RESULT\]\s*\(?\s*(\d+(?:\.\d+)?)\s*\)?", re.IGNORECASE)

RATED, INVALID, EMPTY, ERROR = "rated", "invalid", "empty", "error"


def rubric_text() -> str:
    """The rubric as Prometheus's ``SCORE_RUBRIC_TEMPLATE`` lays it out."""
    return f"[{RUBRIC['criteria']}]\n" + "\n".join(f"Score {k}: {RUBRIC[k]}" for k in range(1, 6))


def fluency_prompt(response: str, instruction: str = "") -> str:
    return PROMPT.format(instruction=instruction, response=response, rubric=rubric_text())


def parse_score(reply: str) -> tuple[int | None, str, str]:
    """``(score, feedback, reason)``: the integer after the last ``[RESULT]`` if it is 1-5.

    ``reason`` says why there is no score ("" when there is one): no ``[RESULT]`` marker, a
    number outside 1-5, or a fraction.
    """
    found = list(_RESULT.finditer(reply))
    feedback = reply[:found[-1].start()] if found else reply
    feedback = re.sub(r"^\s*Feedback:\s*", "", feedback).strip()
    if not found:
        return None, feedback, "no [RESULT] marker followed by a number"
    raw = found[-1].group(1)
    if "." in raw and float(raw) != int(float(raw)):
        return None, feedback, f"[RESULT] {raw} is not an integer from 1 to 5"
    value = int(float(raw))
    if not 1 <= value <= 5:
        return None, feedback, f"[RESULT] {value} is outside 1-5"
    return value, feedback, ""


@dataclass
class Rating:
    score: int | None
    status: str  # rated / invalid / empty / error
    reason: str = ""
    feedback: str = ""
    attempts: int = 0
    replies: list[str] = field(default_factory=list)


class FluencyJudge:
    """Figure 9's rubric through any backend; one request per output (plus retries when sampling)."""

    def __init__(self, backend, *, max_new_tokens: int = 256, temperature: float = 0.0, max_attempts: int = 3,
                 chat: bool = True):
        self.backend = backend
        self.temperature = float(temperature)
        self.max_attempts = int(max_attempts) if self.temperature > 0 else 1  # greedy would answer alike
        self.max_new_tokens, self.chat = int(max_new_tokens), bool(chat)

    def _params(self, attempt: int) -> GenerationParams:
        return GenerationParams(max_new_tokens=self.max_new_tokens, temperature=self.temperature,
                                top_p=0.9 if self.temperature > 0 else 1.0, system_prompt=SYSTEM_PROMPT,
                                chat=self.chat, sample_index=attempt)

    def _generate(self, prompts: Sequence[str], params: GenerationParams):
        """Greedy judgements on an open model decode together (the same tokens as one at a time; one
        prompt at a time was slower on a GPU than on the CPU, docs/benchmarks.md); else the model
        interface (API models: cache, retries, concurrency)."""
        return generate_batched_if_greedy(self.backend, prompts, params)

    def rate(self, outputs: Sequence[str]) -> list[Rating]:
        ratings = [Rating(None, EMPTY, "no output to rate") if not o.strip() else Rating(None, INVALID)
                   for o in outputs]
        todo = [i for i, o in enumerate(outputs) if o.strip()]
        for attempt in range(self.max_attempts):
            if not todo:
                break
            gens = self._generate([fluency_prompt(outputs[i]) for i in todo], self._params(attempt))
            again = []
            for i, g in zip(todo, gens):
                r = ratings[i]
                r.attempts += 1
                if g.status not in (STATUS_OK, STATUS_REFUSAL) or g.error:  # a refusal has text: no score in it
                    r.status, r.reason = ERROR, f"the judge's request failed: {g.error or g.status}"
                    continue
                r.replies.append(g.text)
                score, feedback, reason = parse_score(g.text)
                r.feedback = feedback
                if score is None:
                    r.status, r.reason = INVALID, reason
                    again.append(i)
                else:
                    r.score, r.status, r.reason = score, RATED, ""
            todo = again
        return ratings

    def describe(self) -> dict:
        return {"model": self.backend.name, "temperature": self.temperature, "max_attempts": self.max_attempts,
                "prompt": "Prometheus absolute grading, reference-free (CopyBench Figure 9 without its reference "
                          "phrase)"}
