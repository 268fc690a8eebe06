"""`episode_resample`: shop episodes re-targeted at other customers, orders and amounts; the goal is recomputed.

Design. A `shop` seed's reference episode acts on one customer's orders: it looks the customer up (by the email
the request states), refunds or cancels orders (stated by number, or described: "my most recent delivered
order", "the order that hasn't shipped yet"), and refunds either a whole order or some units of one item. A
variant keeps the episode's shape and moves it onto other records of the same database, read from the
environment's own snapshot of its initial state:

- the customer: another one (with an email when the episode looks one up);
- each order acted on: one of the new customer's orders with the same status; an order the request does not
  state by number keeps its place among that customer's orders of that status (first, last, the only one), and
  one whose month the request names ("my April order") must be the customer's only order of its month;
- each refund: a whole-order refund refunds the new order's total; an item refund refunds as many units of an
  item with the same quantity, of the same product, or of the same category when the request names the product.

The request, the answer and the refund reasons are rewritten consistently (email, name, order numbers, amounts
as `106.96`, product names, month names), and the calls get the new values. The goal is never guessed: the new
reference runs in a fresh environment (`validators.verifiers.episode.replay`), and each expected change of the
parent's goal is taken from the change the same call makes in the new run (the parent's goal says which fields
of which record matter, the run gives their values); each required call takes the new arguments of the call it
matched in the parent. The variant's reference is checked against its goal before it is kept.

Rejects: `unsupported_seed` (not a `shop` episode: a `files` episode's paths and contents are free text the
request states, which this generator does not rewrite; a reference that is not `<tool_call>` blocks and an
answer; orders of several customers; no order acted on; a refund that is neither a whole order nor whole units
of one item), `no_alternatives` (no other customer and orders fit), `reference_failed` (the new reference ends
otherwise than answered, a call is refused, it changes other records than the parent's, or it misses the
recomputed goal), `empty_diff` (the new episode changes nothing), `same_as_parent` (the variant is the parent),
`episode_timeout` (the run hit its wall-clock limit: transient, tried again on the next run).
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from core import SeedwheelError
from generators.base import GenerationResult, Generator, derive_task, last_user_index
from generators.programmatic.tool_call import MONTHS
from validators.environments import Snapshot, environment_class
from validators.registry import VerifyContext
from validators.verifiers.episode import (
    EpisodeReplay,
    call_fits,
    change_fits,
    episode_calls,
    judge_episode,
    replay,
)
from validators.verifiers.tool_call import tagged_calls

_TOOL_BLOCK = re.compile(r"<tool_call>.*?</tool_call>", re.S)


class _Unsupported(SeedwheelError, ValueError):
    """The seed is outside what the generator re-targets; the message says why."""


def _stated(text: str, surface: str) -> bool:
    """Whether `surface` occurs in `text` as a whole word (any case)."""
    return re.search(_word(surface), text, re.I) is not None


def _word(surface: str) -> str:
    return rf"(?<![\w@.]){re.escape(surface)}(?![\w@])"


def rewrite(text: str, substitutions: Mapping[str, str]) -> str:
    """`text` with every whole-word occurrence (any case) of each key replaced by its value, in one pass.

    Example:
        >>> rewrite("Refund order 1021 (106.96), not 10210.", {"1021": "1018", "106.96": "218.99"})
        'Refund order 1018 (218.99), not 10210.'
    """
    if not substitutions:
        return text
    lookup = {old.lower(): new for old, new in substitutions.items()}
    pattern = "|".join(_word(old) for old in sorted(substitutions, key=len, reverse=True))
    return re.sub(pattern, lambda match: lookup[match.group().lower()], text, flags=re.I)


def _cents(amount: int) -> str:
    return f"{amount / 100:.2f}"


@dataclass(frozen=True)
class _Refund:
    """A refund of the reference: its call, its order, and what it refunds (None: the whole order)."""

    call: int
    order: int
    amount: int
    product: int | None = None
    units: int = 0
    named: bool = False  # the request names the product, so another product of its category may stand in


@dataclass(frozen=True)
class _Retarget:
    """One way to move the episode: the new customer, each order's new order, each item refund's new product."""

    customer: int
    orders: tuple[tuple[int, int], ...]
    products: tuple[tuple[int, int], ...]


class _Shop:
    """The shop database's initial state (the environment's snapshot), with the lookups the generator needs."""

    def __init__(self, world: Snapshot):
        self.customers = {int(k): v for k, v in world["customers"].items()}
        self.orders = {int(k): v for k, v in world["orders"].items()}
        self.products = {int(k): v for k, v in world["products"].items()}
        self.items: dict[int, list[dict[str, Any]]] = {}
        for item in world["order_items"].values():
            self.items.setdefault(item["order_id"], []).append(item)

    def total(self, order: int) -> int:
        return sum(item["quantity"] * item["unit_price_cents"] for item in self.items.get(order, []))

    def place(self, order: int) -> tuple[bool, bool]:
        """Whether the order is its customer's first and last (by date) of its status."""
        row = self.orders[order]
        same = sorted(
            (o["order_date"], k)
            for k, o in self.orders.items()
            if o["customer_id"] == row["customer_id"] and o["status"] == row["status"]
        )
        return same[0][1] == order, same[-1][1] == order

    def alone_in_month(self, order: int) -> bool:
        row = self.orders[order]
        month = row["order_date"][:7]
        mine = [o for o in self.orders.values() if o["customer_id"] == row["customer_id"]]
        return sum(o["order_date"][:7] == month for o in mine) == 1

    def month(self, order: int) -> str:
        return MONTHS[int(self.orders[order]["order_date"][5:7]) - 1]

    def item(self, order: int, product: int) -> dict[str, Any]:
        return next(item for item in self.items[order] if item["product_id"] == product)


@dataclass(frozen=True)
class _Episode:
    """What a shop reference does, read from its calls and the database: who, which orders, which refunds."""

    customer: int
    looks_up_email: bool
    orders: tuple[int, ...]
    refunds: tuple[_Refund, ...]
    request: str

    @classmethod
    def read(cls, shop: _Shop, calls: Sequence[Mapping[str, Any]], request: str) -> _Episode:
        emails = [call["arguments"]["email"] for call in calls if call["name"] == "find_customer"]
        orders = list(dict.fromkeys(c["arguments"]["order_id"] for c in calls if "order_id" in c["arguments"]))
        if not orders:
            raise _Unsupported("the reference acts on no order")
        owners = {shop.orders[o]["customer_id"] for o in orders if o in shop.orders}
        owners |= {c["arguments"]["customer_id"] for c in calls if c["name"] == "list_orders"}
        owners |= {k for k, c in shop.customers.items() for e in emails if (c["email"] or "").lower() == e.lower()}
        if len(owners) != 1 or not set(orders) <= set(shop.orders):
            raise _Unsupported(f"the reference acts for {len(owners)} customers, not one")
        refunds = []
        for i, call in enumerate(calls):
            if call["name"] == "refund_order":
                refunds.append(cls._refund(shop, i, call["arguments"], request))
        return cls(owners.pop(), bool(emails), tuple(orders), tuple(refunds), request)

    @staticmethod
    def _refund(shop: _Shop, call: int, arguments: Mapping[str, Any], request: str) -> _Refund:
        order, amount = arguments["order_id"], arguments["amount_cents"]
        if amount == shop.total(order):
            return _Refund(call, order, amount)
        fits = [
            item
            for item in shop.items.get(order, [])
            if amount % item["unit_price_cents"] == 0 and amount // item["unit_price_cents"] <= item["quantity"]
        ]
        if len(fits) != 1:
            raise _Unsupported(
                f"refund of {amount} on order {order} is neither the order's total nor units of one item"
            )
        product = fits[0]["product_id"]
        named = _stated(request, shop.products[product]["name"])
        return _Refund(call, order, amount, product, amount // fits[0]["unit_price_cents"], named)

    def retargets(self, shop: _Shop) -> list[_Retarget]:
        """Every other customer, orders and products the episode fits (see the module docstring), in a fixed order."""
        found = []
        for customer in sorted(shop.customers):
            if self.looks_up_email and not shop.customers[customer]["email"]:
                continue
            slots = [self._order_options(shop, order, customer) for order in self.orders]
            for picked in itertools.product(*slots):
                if len(set(picked)) < len(picked):
                    continue
                orders = dict(zip(self.orders, picked, strict=True))
                item_slots = [self._product_options(shop, refund, orders[refund.order]) for refund in self.refunds]
                for products in itertools.product(*item_slots):
                    option = _Retarget(
                        customer,
                        tuple(orders.items()),
                        tuple((r.call, p) for r, p in zip(self.refunds, products, strict=True) if p is not None),
                    )
                    if option != self._identity():
                        found.append(option)
        return found

    def _identity(self) -> _Retarget:
        products = tuple((r.call, r.product) for r in self.refunds if r.product is not None)
        return _Retarget(self.customer, tuple((o, o) for o in self.orders), products)

    def _order_options(self, shop: _Shop, order: int, customer: int) -> list[int]:
        row = shop.orders[order]
        options = []
        for other, candidate in sorted(shop.orders.items()):
            if candidate["customer_id"] != customer or candidate["status"] != row["status"]:
                continue
            if not _stated(self.request, str(order)) and shop.place(other) != shop.place(order):
                continue  # a described order ("my most recent delivered one") keeps its description
            if _stated(self.request, shop.month(order)) and not shop.alone_in_month(other):
                continue
            options.append(other)
        return options

    @staticmethod
    def _product_options(shop: _Shop, refund: _Refund, order: int) -> list[int | None]:
        if refund.product is None:
            return [None]
        old = shop.item(refund.order, refund.product)
        category = shop.products[refund.product]["category"]
        return [
            item["product_id"]
            for item in sorted(shop.items.get(order, []), key=lambda item: item["product_id"])
            if item["quantity"] == old["quantity"]
            and (
                item["product_id"] == refund.product
                or (refund.named and shop.products[item["product_id"]]["category"] == category)
            )
        ]


def _moved(shop: _Shop, episode: _Episode, option: _Retarget) -> tuple[dict[str, str], dict[int, int], dict[int, int]]:
    """The text substitutions, the new order of each order, and the new amount of each refund call."""
    orders = dict(option.orders)
    products = dict(option.products)
    text: dict[str, str] = {}
    if option.customer != episode.customer:
        old, new = shop.customers[episode.customer], shop.customers[option.customer]
        if old["email"] and new["email"]:
            text[old["email"]] = new["email"]
        text[old["name"]] = new["name"]
        text[old["name"].split()[0]] = new["name"].split()[0]
    for order, other in orders.items():
        text[str(order)] = str(other)
        if _stated(episode.request, shop.month(order)):
            text[shop.month(order)] = shop.month(other)
    amounts = {}
    for refund in episode.refunds:
        other = orders[refund.order]
        if refund.product is None:
            amounts[refund.call] = shop.total(other)
        else:
            product = products[refund.call]
            amounts[refund.call] = refund.units * shop.item(other, product)["unit_price_cents"]
            old_name, new_name = shop.products[refund.product]["name"], shop.products[product]["name"]
            text[old_name] = new_name
            if new_name.startswith("The "):
                text[f"the {old_name}"] = new_name  # never "the The Pragmatic Programmer"
        text[_cents(refund.amount)] = _cents(amounts[refund.call])
    return {old: new for old, new in text.items() if old != new}, orders, amounts


def recomputed_goal(goal: Mapping[str, Any], parent: EpisodeReplay, variant: EpisodeReplay) -> dict[str, Any] | None:
    """The variant's goal: each of the parent's goal checks, with the values the same call has in the variant's run.

    An expected change is found in the parent's run at the call that made it; the variant's change at the same
    call gives the collection, the key (when the parent's goal pins one) and the values of the fields the parent's
    goal names. A required call takes the arguments of the variant's call at the position the parent's matched.

    Returns:
        The goal, or None when the runs do not line up (another number of changes per call, a change of another
        kind, a record changed twice so no single call made the expected change).

    Example:
        >>> from validators.registry import Verdict
        >>> run = EpisodeReplay(Verdict.ok(), "answered", "", 1, [], [], [], [])
        >>> recomputed_goal({"changes": []}, run, run)
        {'changes': []}
    """
    if [len(step) for step in parent.steps] != [len(step) for step in variant.steps]:
        return None
    made = [(i, k) for i, step in enumerate(parent.steps) for k in range(len(step))]
    changes = []
    for expected in goal.get("changes", []):
        where = next(((i, k) for i, k in made if change_fits(parent.steps[i][k], expected)), None)
        if where is None:
            return None
        made.remove(where)
        change = variant.steps[where[0]][where[1]]
        if change.collection != expected["collection"] or (change.after is None) != (expected["after"] is None):
            return None
        after = None if change.after is None else {field: change.after.get(field) for field in expected["after"]}
        changes.append(
            {"collection": change.collection, **({"key": change.key} if "key" in expected else {}), "after": after}
        )
    calls = []
    position = 0
    for required in goal.get("calls", []):
        while position < len(parent.calls) and not call_fits(parent.calls[position], required):
            position += 1
        if position >= len(variant.calls) or variant.calls[position][0] != required["name"]:
            return None
        arguments = variant.calls[position][1]
        if "arguments" in required:
            calls.append({"name": required["name"], "arguments": {k: arguments.get(k) for k in required["arguments"]}})
        else:
            calls.append({"name": required["name"]})
        position += 1
    return {**({"changes": changes} if "changes" in goal else {}), **({"calls": calls} if "calls" in goal else {})}


class EpisodeResample(Generator):
    """Moves a shop episode onto other customers, orders and amounts; recomputes its goal by running the reference.

    Args:
        context: where the shop's database resolves (the verifier's rule); `VerifyContext()` when None.

    Example:
        >>> EpisodeResample().name
        'episode_resample'
    """

    name: ClassVar[str] = "episode_resample"
    version: ClassVar[int] = 1
    families: ClassVar[frozenset[str]] = frozenset({"episode"})
    transient_reject_codes: ClassVar[frozenset[str]] = frozenset({"episode_timeout"})

    def __init__(self, context: VerifyContext | None = None):
        # Resolved at generate time, not here: a module-level instance must not read the environment on import.
        self.context = context

    def fixtures(self, parent: Mapping[str, Any]) -> list[Path]:
        params = parent["verifier"]["params"]
        return environment_class(params["environment"]).fixtures(params["state"], self.context or VerifyContext())

    def generate(self, parent: Mapping[str, Any], *, n: int, random_seed: int) -> GenerationResult:
        """Up to `n` variants of a `shop` episode seed; see the module docstring for the method and reject codes.

        Args:
            parent: a task with `episode` params (`environment: shop`) and a reference of `<tool_call>` blocks.
            n: variants wanted.
            random_seed: with the parent's task_id, fixes the output.

        Returns:
            Variants (distinct task_ids, none equal to the parent) and reject rows.
        """
        out = GenerationResult()
        params = parent["verifier"]["params"]
        context = self.context or VerifyContext()
        reference = parent.get("reference") or ""
        calls = episode_calls(reference)
        if params["environment"] != "shop":
            detail = f"{params['environment']} episodes are not re-targeted (paths and contents are free text)"
            out.rejects.append(self.reject(parent, "unsupported_seed", detail, {}))
            return out
        if not calls or len(_TOOL_BLOCK.findall(reference)) != len(calls):
            detail = "the reference is not <tool_call> blocks and an answer"
            out.rejects.append(self.reject(parent, "unsupported_seed", detail, {}))
            return out
        user = last_user_index(parent["prompt"])
        assert user is not None  # programmatic_variants rejects a parent without one first
        request = parent["prompt"][user]["content"]
        with environment_class("shop")(context=context) as env:
            env.reset(parent)
            shop = _Shop(env.snapshot())
        try:
            episode = _Episode.read(shop, calls, request)
        except _Unsupported as exc:
            out.rejects.append(self.reject(parent, "unsupported_seed", str(exc), {}))
            return out
        options = episode.retargets(shop)
        if not options:
            detail = "no other customer has orders of the same statuses, places and items"
            out.rejects.append(self.reject(parent, "no_alternatives", detail, {}))
            return out
        before = replay(params, reference, context)
        answer = _TOOL_BLOCK.sub("", reference).strip()
        rng = self.rng(parent, random_seed)
        seen = {parent["task_id"]}
        for option in rng.sample(options, min(n, len(options))):
            text, orders, amounts = _moved(shop, episode, option)
            spec = {
                "customer": option.customer,
                "orders": {str(k): v for k, v in orders.items()},
                "substitutions": text,
            }
            new_calls = [self._moved_call(i, call, option, orders, amounts, text) for i, call in enumerate(calls)]
            new_reference = f"{tagged_calls(new_calls)}\n{rewrite(answer, text)}".strip()
            after = replay(params, new_reference, context)
            problem = self._run_problem(after, len(new_calls))
            goal = recomputed_goal(params["goal"], before, after) if problem is None else None
            if problem is None and goal is None:
                problem = "reference_failed", "the new episode changes other records than the parent's"
            elif (
                goal is not None
                and not (verdict := judge_episode(goal, after.changes, after.calls, "answered")).passed
            ):
                problem = "reference_failed", verdict.reason
            if problem is not None:
                out.rejects.append(self.reject(parent, *problem, spec))
                continue
            prompt = [dict(m) for m in parent["prompt"]]
            prompt[user] = {**prompt[user], "content": rewrite(request, text)}
            task = derive_task(
                parent,
                prompt=prompt,
                verifier_params={**params, "goal": goal},
                reference=new_reference,
                generator=self.spec(spec),
            )
            if task["task_id"] in seen:
                out.rejects.append(self.reject(parent, "same_as_parent", "the variant repeats a task", spec))
                continue
            seen.add(task["task_id"])
            out.tasks.append(task)
        return out

    @staticmethod
    def _moved_call(
        index: int,
        call: Mapping[str, Any],
        option: _Retarget,
        orders: Mapping[int, int],
        amounts: Mapping[int, int],
        text: Mapping[str, str],
    ) -> dict[str, Any]:
        """One reference call with the new customer, order, amount and reason."""
        moved = {
            "customer_id": option.customer,
            "order_id": orders.get(call["arguments"].get("order_id", -1)),
            "amount_cents": amounts.get(index),
        }
        arguments: dict[str, Any] = {}
        for key, value in call["arguments"].items():
            if moved.get(key) is not None:
                arguments[key] = moved[key]
            else:
                arguments[key] = rewrite(value, text) if isinstance(value, str) else value
        return {"name": call["name"], "arguments": arguments}

    @staticmethod
    def _run_problem(run: EpisodeReplay, calls: int) -> tuple[str, str] | None:
        """Why the new reference's run cannot give a goal (None when it ran cleanly and changed something)."""
        if run.end_reason == "timeout":
            return "episode_timeout", run.end_detail
        if run.end_reason != "answered" or len(run.calls) != calls:
            return "reference_failed", f"{run.end_reason}, {len(run.calls)} of {calls} calls ran {run.end_detail}"
        if not run.changes:
            return "empty_diff", "the new episode changes nothing"
        return None
