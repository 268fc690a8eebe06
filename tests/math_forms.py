"""What models write as a MATH-style final answer, with the verdict `math_answer` must give: the table of
`tests/validators/test_math_answer.py`, and a source of `bench/math_agreement.py` (where math-verify alone is
judged on the same rows)."""

# (expected answer, completion): each must pass.
ACCEPTS = [
    # Fractions: LaTeX, \dfrac, plain, decimal.
    ("\\frac{1}{2}", "The answer is \\boxed{\\frac{1}{2}}."),
    ("\\frac{1}{2}", "So we get \\boxed{0.5}"),
    ("\\frac{1}{2}", "\\boxed{1/2}"),
    ("\\frac{1}{2}", "Thus $\\dfrac12$."),
    ("\\(\\frac{333}{1997}\\)", "\\boxed{\\frac{333}{1997}}"),
    # Radicals, also rationalised differently.
    ("\\sqrt{2}", "\\boxed{\\frac{2}{\\sqrt{2}}}"),
    ("\\sqrt{2}", "Hence $x = \\sqrt{2}$"),
    ("2\\sqrt{2}", "\\boxed{\\sqrt{8}}"),
    # Expressions compare symbolically.
    ("x^2+2x+1", "\\boxed{(x+1)^2}"),
    ("\\pi/2", "\\boxed{\\frac{\\pi}{2}}"),
    # Intervals, sets (any order), tuples.
    ("(1, 2]", "\\boxed{(1,2]}"),
    ("(-\\infty, 3)", "The solution set is $(-\\infty, 3)$."),
    ("\\{1, 2\\}", "\\boxed{\\{2, 1\\}}"),
    # Units, as LaTeX text or words, are not part of the answer.
    ("5", "\\boxed{5 \\text{ cm}}"),
    ("5", "\\boxed{5 cm}"),
    ("18", "The answer is 18 dollars."),
    # Percentages, thousands separators, a Unicode minus.
    ("50\\%", "\\boxed{0.5}"),
    ("1234", "\\boxed{1,234}"),
    ("-3", "\\boxed{\u22123}"),
    # Markers without a box: GSM8K's ####, "the answer is" with an explanation after it.
    ("18", "#### 18"),
    ("18", "The answer is 18 because 9 * 2 = 18."),
    # No marker, no math: the last line's value.
    ("5", "Therefore, x = 5."),
    # The last box wins: a model that corrects itself.
    ("3", "First \\boxed{4}. Wait, I made an error: \\boxed{3}"),
    # The same box twice is one answer.
    ("3", "\\boxed{3}, that is, \\boxed{3}"),
    # An explanation after the box is not another answer.
    ("3", "\\boxed{3}, which is prime"),
]

# (expected answer, completion, reason code): each must fail with that code.
REJECTS = [
    ("\\frac{1}{2}", "\\boxed{\\frac{1}{3}}", "answer_mismatch"),
    ("\\sqrt{2}", "\\boxed{2}", "answer_mismatch"),
    ("(1, 2]", "\\boxed{[1, 2]}", "answer_mismatch"),
    ("x^2+2x+1", "\\boxed{(x-1)^2}", "answer_mismatch"),
    # A single gold is not a set that holds it beside another value.
    ("3", "\\boxed{\\{3, 4\\}}", "answer_mismatch"),
    # The last box wins, so an early right box does not rescue a wrong final one.
    ("3", "\\boxed{3}. Wait, no: \\boxed{4}", "answer_mismatch"),
    ("3", "", "no_answer"),
    # Hedges: two answers joined, inside a box, after a box, in a marker's line, as an aside.
    ("3", "\\boxed{3} or \\boxed{4}", "ambiguous_answer"),
    ("3", "\\boxed{4}, \\boxed{3}", "ambiguous_answer"),
    ("3", "\\boxed{3 \\text{ or } 4}", "ambiguous_answer"),
    ("3", "\\boxed{3} or $4$", "ambiguous_answer"),
    ("3", "\\boxed{3} (or 4)", "ambiguous_answer"),
    ("3", "The answer is 3 or 4.", "ambiguous_answer"),
    ("3", "The answer is 3, maybe 4.", "ambiguous_answer"),
    # Hostile input that would make sympy compute for hours is refused before parsing.
    ("5", "\\boxed{10^{10^{10}}}", "unsafe_answer"),
    ("5", "\\boxed{2^{10000000000}}", "unsafe_answer"),
    ("5", "10**10**10", "unsafe_answer"),
    ("5", "\\boxed{(10^{9})!}", "unsafe_answer"),
    ("5", "\\boxed{" + "9" * 40 + "}", "unsafe_answer"),
    ("5", "\\boxed{" + "1+" * 200 + "1}", "unsafe_answer"),
]
