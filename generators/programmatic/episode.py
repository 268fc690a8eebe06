"""`episode_resample`: an episode moved onto other records (shop) or other names (files); the goal is recomputed.

Each environment has its own way of moving an episode, and they share the rest: the request, the answer and
the calls are rewritten consistently, the new reference runs in a fresh environment
(`validators.verifiers.episode.replay`), and each expected change of the parent's goal is taken from the change
the same call makes in the new run (the parent's goal says which fields of which record matter, the run gives
their values); each required call takes the new arguments of the call it matched in the parent. The goal is
never guessed, and the variant's reference is checked against its goal before it is kept.

**shop.** A reference acts on one customer's orders: it looks the customer up (by the email the request states),
refunds or cancels orders (stated by number, or described: "my most recent delivered order", "the order that
hasn't shipped yet"), and refunds either a whole order or some units of one item. A variant keeps the episode's
shape and moves it onto other records of the same database, read from the environment's own snapshot of its
initial state:

- the customer: another one (with an email when the episode looks one up);
- each order acted on: one of the new customer's orders with the same status; an order the request does not
  state by number keeps its place among that customer's orders of that status (first, last, the only one), and
  one whose month the request names ("my April order") must be the customer's only order of its month;
- each refund: a whole-order refund refunds the new order's total; an item refund refunds as many units of an
  item with the same quantity, of the same product, or of the same category when the request names the product.

The request, the answer and the refund reasons are rewritten (email, name, order numbers, amounts as `106.96`,
product names, month names), and the calls get the new values.

**files.** A variant renames the files and folders: a name is a path part up to its first dot (`report` in
`report.txt`, `app` in `logs/app.log.1`, the folder `archive`), so extensions stay (a request that picks files by
extension, "every .tmp file", still picks the same ones) and the files that share a name keep sharing it
(`app.log` and `logs/app.log.1`). Each renamed name gets a fresh plain word (`summary`, `exports`, ...) that no
text of the task contains and that holds no word of the request nor another name (no `reports` beside `report`),
and every occurrence of it is rewritten, case-sensitively: in the request, the answer, the state's paths and
contents, and the calls' paths and written contents (the system message, with its generic example paths, stays
as it is). What stays:

- a name that some text uses otherwise than as a path (`notes.txt` mentions "the report"; `q2.txt` says
  "Q2 revenue"), since a rewrite cannot tell the two apart; a path mention is the name followed by an extension
  or a `/`, after a `/`, or next to "folder"/"directory" ("the archive folder");
- a name the reference acts on that the request does not mention as a path: the request describes those files
  ("every .tmp file under build/") rather than naming them, and the description may rest on their names, so the
  files it does not act on keep their names too (a renamed one could come to fit the description);
- contents, apart from the names in them: a file's words are free text a request may select by, and changed
  text would be a guess (a rotated log whose times no longer come before the current one's).

Rejects: `unsupported_seed` (an environment without a resampler; a reference that is not `<tool_call>` blocks
and an answer; shop: orders of several customers, no order acted on, a refund that is neither a whole order nor
whole units of one item; files: the request mentions a file the reference acts on in a way a rewrite cannot
follow: in another case, both as a path and as a word ("Archive report.txt in the archive folder"), or through
a name pattern such as `draft*`), `no_alternatives` (shop: no other customer and orders fit; files: every name
stays), `reference_failed` (the new reference ends otherwise than answered, a call is refused, it changes other
records than the parent's, or it misses the recomputed goal), `empty_diff` (the new episode changes nothing),
`same_as_parent` (the variant is the parent), `episode_timeout` (the run hit its wall-clock limit: transient,
tried again on the next run).
"""

from __future__ import annotations

import itertools
import random
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, ClassVar, Protocol

from core import SeedwheelError
from generators.base import GenerationResult, Generator, derive_task, last_user_index
from generators.programmatic.tool_call import MONTHS
from validators.environments import Change, Snapshot, environment_class
from validators.registry import VerifyContext
from validators.verifiers.episode import (
    TOOL_BLOCK,
    EpisodeReplay,
    call_fits,
    change_fits,
    episode_answer,
    episode_calls,
    judge_episode,
    replay,
)
from validators.verifiers.tool_call import tagged_calls

# Characters that continue a word: an email's `@`, and in a path `-` too (`app` is no name in `app-old.txt`).
_WORD_JOINERS = r"\w@"
_PATH_JOINERS = r"\w@\-"


class _Unsupported(SeedwheelError, ValueError):
    """The seed is outside what the generator re-targets; the message says why."""


class _NoAlternatives(SeedwheelError, ValueError):
    """The seed fits the generator, but nothing can change; the message says why."""


def _stated(text: str, surface: str) -> bool:
    """Whether `surface` occurs in `text` as a whole word (any case)."""
    return re.search(_word(surface), text, re.I) is not None


def _word(surface: str, joiners: str = _WORD_JOINERS) -> str:
    """A pattern of `surface` as a whole word: no joiner on either side, and no `.` before it (not an extension)."""
    return rf"(?<![{joiners}.]){re.escape(surface)}(?![{joiners}])"


def rewrite(text: str, substitutions: Mapping[str, str], *, paths: bool = False) -> str:
    """`text` with every whole-word occurrence (any case) of each key replaced by its value, in one pass.

    Args:
        text: the text to rewrite.
        substitutions: old word -> new word.
        paths: rewrite names in paths: case-sensitive, and `-` joins words (`app` is not rewritten in `app-old`).

    Example:
        >>> rewrite("Refund order 1021 (106.96), not 10210.", {"1021": "1018", "106.96": "218.99"})
        'Refund order 1018 (218.99), not 10210.'
        >>> rewrite("Keep app.log as logs/app.log.1, not App.log or app-old.log.", {"app": "web"}, paths=True)
        'Keep web.log as logs/web.log.1, not App.log or app-old.log.'
    """
    if not substitutions:
        return text
    key = (lambda word: word) if paths else str.lower
    lookup = {key(old): new for old, new in substitutions.items()}
    joiners = _PATH_JOINERS if paths else _WORD_JOINERS
    pattern = "|".join(_word(old, joiners) for old in sorted(substitutions, key=len, reverse=True))
    return re.sub(pattern, lambda match: lookup[key(match.group())], text, flags=0 if paths else re.I)


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


@dataclass(frozen=True)
class _Move:
    """One variant to try: its lineage params, the rewrite of its texts, its reference's calls and initial state."""

    spec: dict[str, Any]
    substitutions: dict[str, str]
    calls: list[dict[str, Any]]
    state: Mapping[str, Any]
    paths: bool = False  # the substitutions are names in paths (`rewrite(paths=True)`)

    def rewrite(self, text: str) -> str:
        return rewrite(text, self.substitutions, paths=self.paths)


class _ShopPlan:
    """The shop episode's reading and the other customers, orders and products it fits (the module docstring)."""

    def __init__(self, parent: Mapping[str, Any], calls: list[dict[str, Any]], request: str, context: VerifyContext):
        with environment_class("shop")(context=context) as env:
            env.reset(parent)
            self.shop = _Shop(env.snapshot())
        self.episode = _Episode.read(self.shop, calls, request)
        self.calls = calls
        self.state = parent["verifier"]["params"]["state"]
        self.options = self.episode.retargets(self.shop)
        if not self.options:
            raise _NoAlternatives("no other customer has orders of the same statuses, places and items")

    def draw(self, rng: random.Random, n: int) -> list[_Retarget]:
        return rng.sample(self.options, min(n, len(self.options)))

    def move(self, option: _Retarget) -> _Move:
        text, orders, amounts = self._moved(option)
        spec = {"customer": option.customer, "orders": {str(k): v for k, v in orders.items()}, "substitutions": text}
        calls = [self._moved_call(i, call, option, orders, amounts, text) for i, call in enumerate(self.calls)]
        return _Move(spec, text, calls, self.state)

    def _moved(self, option: _Retarget) -> tuple[dict[str, str], dict[int, int], dict[int, int]]:
        """The text substitutions, the new order of each order, and the new amount of each refund call."""
        shop, episode = self.shop, self.episode
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


# Fresh names for renamed files and folders: plain words, so a new name never looks like a pattern ("tmp_", "v2").
FILE_NAMES = (
    *("summary", "budget", "minutes", "agenda", "invoice", "roadmap", "ledger", "schedule"),
    *("inventory", "contacts", "checklist", "proposal", "forecast", "timeline", "digest", "memo"),
)
FOLDER_NAMES = (
    *("backup", "exports", "shared", "misc", "projects", "records", "drafts", "storage"),
    *("vault", "attic", "inbox", "outbox", "history", "media", "library", "spool"),
)
_PATH_ARGUMENTS = frozenset({"path", "source", "destination", "folder"})
_FOLDER_WORD = re.compile(r"\s+(folder|directory)\b", re.I)
_WORD_FOLDER = re.compile(r"\b(folder|directory)\s+$", re.I)
# A glob that picks files by folder and extension only ("*.tmp", "build/*.tmp", "logs/*"), which renames keep.
_EXTENSION_GLOB = re.compile(r"(?:(?:[\w.\-]+|\*\*)/)*\*(?:\.[A-Za-z0-9]+)*")


def _names(path: str) -> list[tuple[str, bool]]:
    """The names along a path, each `(name, is_folder)`: every part up to its first dot (`.` and dotfiles: none).

    Example:
        >>> _names("logs/app.log.1"), _names(".")
        ([('logs', True), ('app', False)], [])
    """
    parts = PurePosixPath(path).parts
    found = [(part.split(".", 1)[0], i < len(parts) - 1) for i, part in enumerate(parts)]
    return [(name, folder) for name, folder in found if name]


def name_mentions(text: str, name: str) -> list[tuple[str, str]]:
    """How `text` mentions a file or folder name: each occurrence (any case) as `(kind, as written)`.

    The kinds: `path` (the name as written in the paths, followed by an extension or a `/`, after a `/`, or next to
    "folder"/"directory"), `case` (the same, in another case) and `word` (any other occurrence).

    Example:
        >>> name_mentions("Archive report.txt in the archive folder.", "archive")
        [('word', 'Archive'), ('path', 'archive')]
    """
    found = []
    for match in re.finditer(_word(name, _PATH_JOINERS), text, re.I):
        before, after = text[: match.start()], text[match.end() :]
        shaped = (
            before.endswith("/")
            or re.match(r"/|\.[A-Za-z0-9]", after) is not None
            or _FOLDER_WORD.match(after) is not None
            or _WORD_FOLDER.search(before) is not None
        )
        kind = "word" if not shaped else "path" if match.group() == name else "case"
        found.append((kind, match.group()))
    return found


class _FilesPlan:
    """The names a files episode may rename, and the fresh names they may take (the module docstring)."""

    def __init__(self, parent: Mapping[str, Any], calls: list[dict[str, Any]], request: str, context: VerifyContext):
        self.calls = calls
        self.files: dict[str, str] = parent["verifier"]["params"]["state"]["files"]
        _check_patterns(request)
        acted = [value for call in calls for key, value in call["arguments"].items() if key in _PATH_ARGUMENTS]
        names = {name for path in [*self.files, *acted] for name, _ in _names(path)}
        folders = {name for path in [*self.files, *acted] for name, folder in _names(path) if folder}
        folders |= {name for call in calls for name, _ in _names(call["arguments"].get("folder", "."))}
        answer = episode_answer(parent.get("reference") or "")
        written = [
            v for c in calls for k, v in c["arguments"].items() if k not in _PATH_ARGUMENTS and isinstance(v, str)
        ]
        others = [answer, *written, *self.files.values()]  # the texts besides the request that get rewritten
        kept = _kept_names(request, others, names, {name for path in acted for name, _ in _names(path)})
        renamed = sorted(names - kept)
        if not renamed:
            raise _NoAlternatives(f"no name can change: {', '.join(sorted(kept))} stay")
        prompt = [m["content"] for m in parent["prompt"] if isinstance(m.get("content"), str)]
        taken = "\n".join([*prompt, *others, *self.files, *acted]).lower()
        words = set(re.findall(r"[a-z]{3,}", " ".join([request, *names]).lower()))

        def fresh(pool: Sequence[str]) -> list[str]:
            # In no text of the task, and holding no word of the request nor a name ("reports" next to "report").
            return [new for new in pool if new not in taken and not any(word in new for word in words)]

        self.folder_pool, self.name_pool = fresh(FOLDER_NAMES), fresh(FILE_NAMES)
        # Names beyond a pool's size stay as they are.
        self.folders = [name for name in renamed if name in folders][: len(self.folder_pool)]
        self.names = [name for name in renamed if name not in folders][: len(self.name_pool)]
        if not self.folders and not self.names:
            raise _NoAlternatives(f"no fresh name is left for {', '.join(renamed)}")

    def draw(self, rng: random.Random, n: int) -> list[dict[str, str]]:
        """Up to `n` distinct renamings, each name to its own fresh one."""
        found: list[dict[str, str]] = []
        for _ in range(20 * n):
            if len(found) == n:
                break
            option = {
                **dict(zip(self.folders, rng.sample(self.folder_pool, len(self.folders)), strict=True)),
                **dict(zip(self.names, rng.sample(self.name_pool, len(self.names)), strict=True)),
            }
            if option not in found:
                found.append(option)
        return found

    def move(self, option: dict[str, str]) -> _Move:
        def moved(value: Any) -> Any:
            return rewrite(value, option, paths=True) if isinstance(value, str) else value

        calls = [
            {"name": c["name"], "arguments": {k: moved(v) for k, v in c["arguments"].items()}} for c in self.calls
        ]
        state = {"files": {moved(path): moved(content) for path, content in self.files.items()}}
        return _Move({"names": option}, option, calls, state, paths=True)


def _check_patterns(request: str) -> None:
    """Refuse a request that picks files by a name pattern (`draft*`, `*_old.txt`); `logs/*.log` is fine."""
    for token in re.findall(r"\S*\*\S*", request):
        glob = token.strip("\"'`,;:!?()[]{}").rstrip(".")
        if not _EXTENSION_GLOB.fullmatch(glob):
            raise _Unsupported(f"the request names files by a pattern ({glob!r}), which a rename could break")


def _kept_names(request: str, others: Sequence[str], names: set[str], acted: set[str]) -> set[str]:
    """The names a files variant keeps (the module docstring): each used as a word somewhere, and when the request
    describes a file the reference acts on instead of naming it, every name the request does not name as a path.

    Raises:
        _Unsupported: the request mentions a file the reference acts on in another case, or as a path and a word.
    """
    kept, described, stated = set(), set(), set()
    for name in sorted(names):
        said = name_mentions(request, name)
        kinds = {kind for kind, _ in said}
        if name in acted and "case" in kinds:
            word = next(written for kind, written in said if kind == "case")
            raise _Unsupported(f"the request writes {word!r} for {name!r}, a name in a path the episode acts on")
        if name in acted and kinds == {"path", "word"}:
            raise _Unsupported(
                f"the request says {name!r} both as the name in a path the episode acts on and as a word"
            )
        if "path" in kinds:
            stated.add(name)
        elif name in acted:
            described.add(name)
        if kinds - {"path"} or any(kind != "path" for text in others for kind, _ in name_mentions(text, name)):
            kept.add(name)
    return kept | (names - stated) if described else kept


class _Plan(Protocol):
    """How an environment's episodes move: the options for one parent, and the variant each option makes."""

    def draw(self, rng: random.Random, n: int) -> Sequence[Any]: ...

    def move(self, option: Any) -> _Move: ...


# Environment -> its plan, built from (parent, reference calls, request, context); raises _Unsupported or
# _NoAlternatives when the parent cannot move.
_PLANS: dict[str, Callable[[Mapping[str, Any], list[dict[str, Any]], str, VerifyContext], _Plan]] = {
    "shop": _ShopPlan,
    "files": _FilesPlan,
}


def _counterpart(parent_step: Sequence[Change], variant_step: Sequence[Change], k: int) -> Change | None:
    """The variant's change that stands for the parent's `k`-th change of one call: the same collection and kind
    (insert, update, delete), at the same rank among those (a move's delete and insert pair up whatever the new
    paths' order)."""

    def sort(change: Change) -> tuple[str, bool, bool]:
        return change.collection, change.before is None, change.after is None

    kind = sort(parent_step[k])
    rank = sum(sort(change) == kind for change in parent_step[:k])
    same = [change for change in variant_step if sort(change) == kind]
    return same[rank] if rank < len(same) else None


def recomputed_goal(goal: Mapping[str, Any], parent: EpisodeReplay, variant: EpisodeReplay) -> dict[str, Any] | None:
    """The variant's goal: each of the parent's goal checks, with the values the same call has in the variant's run.

    An expected change is found in the parent's run at the call that made it; the variant's change at the same
    call, of the same collection and kind (insert, update, delete), gives the key (when the parent's goal pins one)
    and the values of the fields the parent's goal names. A required call takes the arguments of the variant's
    call at the position the parent's matched.

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
        change = _counterpart(parent.steps[where[0]], variant.steps[where[0]], where[1])
        if change is None:
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
    """Moves an episode onto other records (shop) or names (files); recomputes its goal by running the reference.

    Args:
        context: where the shop's database resolves (the verifier's rule); `VerifyContext()` when None.

    Example:
        >>> EpisodeResample().name
        'episode_resample'
    """

    name: ClassVar[str] = "episode_resample"
    version: ClassVar[int] = 2
    families: ClassVar[frozenset[str]] = frozenset({"episode"})
    transient_reject_codes: ClassVar[frozenset[str]] = frozenset({"episode_timeout"})

    def __init__(self, context: VerifyContext | None = None):
        # Resolved at generate time, not here: a module-level instance must not read the environment on import.
        self.context = context

    def fixtures(self, parent: Mapping[str, Any]) -> list[Path]:
        params = parent["verifier"]["params"]
        return environment_class(params["environment"]).fixtures(params["state"], self.context or VerifyContext())

    def generate(self, parent: Mapping[str, Any], *, n: int, random_seed: int) -> GenerationResult:
        """Up to `n` variants of a `shop` or `files` episode seed; the module docstring has the method and rejects.

        Args:
            parent: a task with `episode` params and a reference of `<tool_call>` blocks and an answer.
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
        planner = _PLANS.get(params["environment"])
        if planner is None:
            detail = f"{params['environment']} episodes have no resampler (the resampled ones: {', '.join(_PLANS)})"
            out.rejects.append(self.reject(parent, "unsupported_seed", detail, {}))
            return out
        if not calls or len(TOOL_BLOCK.findall(reference)) != len(calls):
            detail = "the reference is not <tool_call> blocks and an answer"
            out.rejects.append(self.reject(parent, "unsupported_seed", detail, {}))
            return out
        user = last_user_index(parent["prompt"])
        assert user is not None  # programmatic_variants rejects a parent without one first
        request = parent["prompt"][user]["content"]
        try:
            plan = planner(parent, calls, request, context)
        except _Unsupported as exc:
            out.rejects.append(self.reject(parent, "unsupported_seed", str(exc), {}))
            return out
        except _NoAlternatives as exc:
            out.rejects.append(self.reject(parent, "no_alternatives", str(exc), {}))
            return out
        before = replay(params, reference, context)
        answer = episode_answer(reference)
        rng = self.rng(parent, random_seed)
        seen = {parent["task_id"]}
        for option in plan.draw(rng, n):
            move = plan.move(option)
            moved_params = {**params, "state": move.state}
            new_reference = f"{tagged_calls(move.calls)}\n{move.rewrite(answer)}".strip()
            after = replay(moved_params, new_reference, context)
            problem = self._run_problem(after, len(move.calls))
            goal = recomputed_goal(params["goal"], before, after) if problem is None else None
            if problem is None and goal is None:
                problem = "reference_failed", "the new episode changes other records than the parent's"
            elif (
                goal is not None
                and not (verdict := judge_episode(goal, after.changes, after.calls, "answered")).passed
            ):
                problem = "reference_failed", verdict.reason
            if problem is not None:
                out.rejects.append(self.reject(parent, *problem, move.spec))
                continue
            prompt = [dict(m) for m in parent["prompt"]]
            prompt[user] = {**prompt[user], "content": move.rewrite(request)}
            task = derive_task(
                parent,
                prompt=prompt,
                verifier_params={**moved_params, "goal": goal},
                reference=new_reference,
                generator=self.spec(move.spec),
            )
            if task["task_id"] in seen:
                out.rejects.append(self.reject(parent, "same_as_parent", "the variant repeats a task", move.spec))
                continue
            seen.add(task["task_id"])
            out.tasks.append(task)
        return out

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
