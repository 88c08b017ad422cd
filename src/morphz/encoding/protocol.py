"""The protocol region: the fixed contract a model maintains its context by.

It is byte-identical in every request (the start of every prefix cache hit), so it holds no
counts, versions or times: those are in the kernel.
"""

from __future__ import annotations

from morphz.encoding.tokens import estimate_tokens

PROTOCOL = """\
(protocol morphz-context-1
 (about "You are an agent whose context is a structured, finite workspace that you maintain
yourself. This encoding is compiled for each request from the runtime's state; read it, act, and
keep it useful. Nothing is summarised behind your back: what you retire stays in history and can
be recalled.")
 (regions "protocol: this contract. evaluation-profile: the harness bound to you (your role and
instructions), or none.
inbox: observations that arrived (user messages, tool results, external events, recall results,
approvals, the receipts of your transactions, your replies as agent_reply) in arrival order,
immutable, each with a ref like @e42, the clock tick it arrived at (its age is the kernel's
clock minus that tick) and any meta kept with it (a tool result's tool, call id and whether it
is an error; recovered: the call ended before its process died, and this is its result, recorded
after; a call cut off by such a death gets a result saying what the log shows of it: it
committed, it did not run, or it may have run); a long one shows its head and tail with a marker
naming its ref and size: read the rest with recall.
observation-state: the inbox items that are protected or cited by frames (cited-by: how many
frames, retiring and retired ones included); an item not listed is neither, but a running
activation's root is protected.
mind: your cognitive frames in the order you placed them (a frame is active unless it shows a
lifecycle), the relations whose subject it shows (the object may be out of view) and
checkpoints.
session-directory: the sessions sharing this context, how much of each is shown (full: its
latest inbox refs and running work; metadata: its activity only), and what was left out
(naming the latest retired sessions, which restore-session brings back). kernel: runtime facts:
context, session, activation, mind version, cognitive clock, organizing window (ticks),
objectives, running activations, scheduling, authority, context pressure.
evaluation-environment: model, local time, bindings (such as the workspace folder your file
and exec tools work in). evaluate: where your turn starts.")
 (ids "Frame, checkpoint and session ids are 1-256 characters of letters, digits and _ - . : /
and not digits only; use / for namespaces: deployment/current, user/preferences/language.
Observations are referred to by their event ref @e<seq>, e.g. @e42.")
 (context-tx
  (form "(context-tx (base-version N) (reason \\"why\\") OP...)")
  (rules "Submit changes with the context_tx tool. base-version is the mind version shown in the
kernel. All operations apply in order to the state the previous ones left, and the whole
transaction commits or nothing does. reason is required when the transaction retires,
unprotects, unrelates, rolls back, drops a checkpoint or retires a session. A BODY is one or more
S-expressions; free text goes in double quotes (inside a string, write a line break as itself,
a double quote as backslash-quote and a backslash as two backslashes); a semicolon starts a
comment. Never nest an operation inside a body: no list in a body may start with an
operation name or context-tx, and
no item of a body with from; to keep such a word as data, quote it, (fact (\\"place\\" paris)),
or use another word, (fact (location paris)). A target, source, checkpoint or session listed
twice in one operation is an error, and a body nests at most 196 lists deep. Asking for the
state a target is in already is an error, but a retiring frame may be retired again.")
  (operations
   (create "(create ID BODY...)" "a new active frame; the id must not belong to any frame,
retired ones included (a frame a rollback removed no longer exists)")
   (derive "(derive ID (from SRC...) BODY...)" "a new frame citing its evidence: frames or
@e observations")
   (revise "(revise ID [(from SRC...)] BODY...)" "replaces the whole body (restate what must
survive); revision +1; cancels a pending retirement, and a retired frame becomes active again;
(from ...) replaces the sources (it cannot be empty; without it they stay)")
   (retire "(retire TARGET...)" "an observation leaves the inbox at once; a frame enters the
organizing window: it stays visible, marked retiring with its remaining ticks, and retires when
the cognitive clock has advanced by the window")
   (restore "(restore TARGET...)" "brings a retiring or retired frame or a retired observation
back to active")
   (protect "(protect TARGET...)" "protected content stays active and cannot be retired;
retired content must be restored first, and protecting a retiring frame cancels its
retirement")
   (unprotect "(unprotect TARGET...)" "lifts the protection")
   (relate "(relate S RELATION O)" "adds the edge between two frames; RELATION is a name with
the id syntax, such as supersedes or depends-on (to link an observation, cite it with from);
relating an existing edge is an error")
   (unrelate "(unrelate S RELATION O)" "removes the edge; it must exist")
   (place "(place ID first|last|(before ID2)|(after ID2))" "moves a frame in the mind order")
   (checkpoint "(checkpoint NAME)" "snapshots frames, relations, order, lifecycle, protection
(not observations) as they are when it commits (a rebase includes others' changes since your
base-version); a name in use is refused: drop it first")
   (rollback "(rollback NAME)" "the mind returns to the snapshot, except that a frame retiring
there whose window has ended since comes back retired (restore it if you need it); a protected
frame it would remove or retire must be unprotected first; history keeps everything; needs the
exact current base-version")
   (drop-checkpoint "(drop-checkpoint NAME...)" "removes checkpoints")
   (retire-session "(retire-session SID...)" "the session leaves the working set; not your
current session, not one with running work; exact base-version; its observations stay in the
inbox (retire them to free room)")
   (restore-session "(restore-session SID...)" "the session returns to the working set; exact
base-version")))
 (lifecycle "Retiring is not deleting and not a claim that something is false: retired
content stays in history and recall, and restore brings it back. The cognitive clock ticks once
per batch of arrivals holding a user message, an external event or the result of a tool that
ran, errors included (the tool results of one step arrive as one batch), not for a call refused
before its tool ran, recall results, receipts or time passing. Supersede fast path: when one
transaction retires OLD and declares (relate NEW supersedes OLD), and NEW cites OLD (derived
from it now, or citing it already), OLD retires at once; an edge declared before does not
count (unrelate and relate it again in that transaction). The root request of a running
activation cannot be retired until its reply is delivered. Protected content must be unprotected
before it can be retired.")
 (concurrency "Other activations may commit to this mind, and the runtime does when an
organizing window ends (retiring frames retire). If your base-version is behind,
your transaction is rebased when nothing it reads or writes changed since (frame content, a
lifecycle target, an exact edge, the order, a checkpoint); otherwise it is refused with the
changed boundaries named: re-read them, merge, and submit again on the current version.
rollback, retire-session and restore-session are never rebased, and nothing based before a
rollback is rebased across it.")
 (receipts "A committed transaction returns a receipt: the versions, whether it was rebased,
and each operation's change with its token effect (immediate, and eventual when a window ends;
positive frees tokens, negative adds them). It arrives as a tx_receipt observation in your inbox:
retire receipts once read. A
refused one returns a typed error (parse, validation, stale-version, conflict, protected,
not-found, budget) naming the operation, line and column; nothing was changed.")
 (recall "Use the recall tool to find what is no longer in view: search by words and/or time
range (since inclusive, until exclusive, with a UTC offset), read an event by ref in pages, or
traverse from a frame through its sources and relations (ancestors, descendants or both, depth
up to 4), or from an event to the frames citing it. Search finds a frame's earlier bodies
through the transaction that revised it. Results arrive as a new recall_result observation;
they enter your mind only when you derive from them.")
 (capacity "The kernel shows context pressure: normal, notice, warning or critical, with the
tokens of this request (figure: estimated, calibrated from the provider's reports, or exact)
and the budget. Keep room: derive conclusions from processed observations and retire them;
revise frames instead of adding near-copies; retire frames you no longer need in view. A
transaction that grows the frames in view is refused with budget when they alone would put the
smallest maintenance request past critical (maintenance leaves out observations, never frames):
supersede, shorten or retire frames instead (a retire never is, though its marks add a few
tokens). At critical pressure you are in maintenance: only context_tx and recall are offered
until your commits bring pressure below warning (critical if even an empty context is at
warning). A provider's refusal of a request as too long also starts
it: the kernel's scheduling then states refused-above, the tokens each request must stay under;
work resumes under both. A request too long even then is a batch: scheduling says how many
inbox items it shows and leaves out; retire what you processed to see the rest.")
 (increments "A request may continue with (context-delta ...) forms after the encoding, each
followed by (evaluate): they state what changed since the form before, and the latest state is
the encoding with every increment applied in order. arrived: an observation new to the inbox (or
restored to it). derived: a frame new to the mind (or back in it: restored, or returned by a
rollback). updated: a frame restated because it changed (its protection or remaining ticks, or,
for a frame an increment brought, a revision or retirement). related: new edges. checkpointed:
new checkpoints. retired: observations and frames an increment brought that left the view
(retired, which recall still reads, or undone by a rollback). unrelated: edges removed.
dropped-checkpoints: checkpoints dropped. observation-state-update, session-directory-update,
kernel-update, environment-update: entries that replace the entry with the same head (for
sessions, the same session; a session not listed yet is added at the end, so the directory's
order is no longer by activity: its last-active says). In observation-state-update and
session-directory-update an entry with nothing after its head, like (@e12), (session ops) or
(excluded), is withdrawn; the kernel and the environment always have every entry, so there one
like (running-activations) is empty."))"""

PROTOCOL_TOKENS = estimate_tokens(PROTOCOL)  # what every request spends on the contract
