"""The election's decisions, without I/O (walkit.recipes.LeaseState)."""

from __future__ import annotations

from walkit.recipes import Action, Claim, LeaseState, Role

ME = Claim("aaaa", "127.0.0.1:1")
OTHER = Claim("bbbb", "127.0.0.1:2")


def test_create_wins() -> None:
    s = LeaseState(ME)
    assert s.start() is Action.CREATE
    assert s.created() is Action.WAIT
    assert (s.role, s.leader) == (Role.LEADER, ME)


def test_node_taken_means_follow_its_holder() -> None:
    s = LeaseState(ME)
    s.start()
    assert s.exists() is Action.READ
    assert s.read(OTHER.encode()) is Action.WAIT
    assert (s.role, s.leader) == (Role.FOLLOWER, OTHER)
    # The holder's node goes away: try to take it.
    assert s.deleted() is Action.CREATE
    assert (s.role, s.leader) == (Role.CANDIDATE, None)
    assert s.step_downs == 0


def test_gone_between_create_and_read_means_try_again() -> None:
    s = LeaseState(ME)
    s.start()
    s.exists()
    assert s.read(None) is Action.CREATE
    assert s.role is Role.CANDIDATE


def test_own_claim_found_means_leading() -> None:
    """A create that went through but whose answer was lost."""
    s = LeaseState(ME)
    s.start()
    s.exists()
    assert s.read(ME.encode()) is Action.WAIT
    assert s.role is Role.LEADER


def test_leader_steps_down_when_the_node_is_not_its_own() -> None:
    s = LeaseState(ME)
    s.start()
    s.created()
    assert s.changed() is Action.READ
    assert s.read(OTHER.encode()) is Action.WAIT
    assert (s.role, s.leader, s.step_downs) == (Role.FOLLOWER, OTHER, 1)


def test_session_lost_while_leading() -> None:
    s = LeaseState(ME)
    s.start()
    s.created()
    assert s.session_lost() is Action.NEW_SESSION
    assert (s.role, s.leader, s.step_downs) == (Role.CANDIDATE, None, 1)
    assert s.backoff == 0.25  # the others get the first chance
    new = Claim("cccc", ME.advertise)
    assert s.start(new) is Action.CREATE
    assert s.claim == new
    s.exists()
    # The old session's claim is not ours any more.
    s.read(ME.encode())
    assert s.role is Role.FOLLOWER


def test_deleted_while_leading_is_a_step_down() -> None:
    s = LeaseState(ME)
    s.start()
    s.created()
    assert s.deleted() is Action.CREATE
    assert s.step_downs == 1


def test_store_failures_back_off_and_keep_the_role() -> None:
    s = LeaseState(ME, backoff_base=0.1, backoff_max=0.5)
    s.start()
    s.created()
    delays = []
    for _ in range(5):
        assert s.store_failed() is Action.BACKOFF
        delays.append(s.backoff)
    assert delays == [0.1, 0.2, 0.4, 0.5, 0.5]
    assert s.role is Role.LEADER
    s.read(ME.encode())
    assert s.backoff == 0.0
    assert s.store_failed() is Action.BACKOFF and s.backoff == 0.1


def test_malformed_node_is_someone_elses() -> None:
    s = LeaseState(ME)
    s.start()
    s.exists()
    assert s.read(b"\xff not json") is Action.WAIT
    assert (s.role, s.leader) == (Role.FOLLOWER, None)


def test_stop_is_final() -> None:
    s = LeaseState(ME)
    s.start()
    s.created()
    assert s.stop() is Action.NOTHING
    assert s.role is Role.STOPPED and s.step_downs == 1
    s.deleted()
    s.start()
    assert s.role is Role.STOPPED


def test_claim_round_trips() -> None:
    assert Claim.decode(ME.encode()) == ME


def test_session_lost_as_follower_rejoins_at_once() -> None:
    s = LeaseState(ME)
    s.start()
    s.exists()
    s.read(OTHER.encode())
    assert s.session_lost() is Action.NEW_SESSION
    assert s.backoff == 0.0 and s.step_downs == 0
