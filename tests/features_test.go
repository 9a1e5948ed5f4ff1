package tests

import (
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"
	"github.com/windowstore/windowstore/features"
	"github.com/windowstore/windowstore/store"
	"github.com/windowstore/windowstore/tests/harness"
)

// riskFeatures is a login-and-payment feature set of seven features over four
// entities.
func riskFeatures() []features.Feature {
	min, hour, day := store.Window{Length: time.Minute, Bucket: time.Second},
		store.Window{Length: time.Hour, Bucket: time.Minute}, store.Window{Length: 24 * time.Hour, Bucket: time.Hour}
	return []features.Feature{
		{Name: "user_attempts", Entity: "user", Kind: features.Count, Windows: []store.Window{min, hour, day}},
		{Name: "user_login_limit", Entity: "user", Kind: features.Limit, Windows: []store.Window{min, hour}, Limits: []int64{5, 20}},
		{Name: "ip_attempts", Entity: "ip", Kind: features.Count, Windows: []store.Window{{Length: 10 * time.Minute, Bucket: 10 * time.Second}}},
		{Name: "ip_users", Entity: "ip", Kind: features.Distinct, Of: "user", Windows: []store.Window{hour}},
		{Name: "card_spend", Entity: "card", Kind: features.Sum, Windows: []store.Window{hour, day}},
		{Name: "card_spend_limit", Entity: "card", Kind: features.Limit, SpendAmount: true, Windows: []store.Window{day}, Limits: []int64{1000}},
		{Name: "device_cards", Entity: "device", Kind: features.Distinct, Of: "card", Windows: []store.Window{day}},
	}
}

// TestRecord records login and payment events through a feature set on
// every backend: every value, the limits' decision (per entity, all or
// nothing), duplicates, and a Read that writes nothing.
func TestRecord(t *testing.T) {
	forEach(t, func(t *testing.T, tg target) {
		srv := newStoreServer(t, tg)
		c := srv.Client(t)
		ctx := ctxT(t)
		prefix := prefixFor(t)
		set, err := features.New(ctx, c, riskFeatures(), store.WithPrefix(prefix), store.WithBackend(tg.backend))
		require.NoError(t, err)
		t0 := time.Now().Truncate(time.Hour).Add(-3 * time.Hour)
		login := func(i int, user, ip string) features.Result {
			r, err := set.At(t0.Add(time.Duration(i)*5*time.Second)).Record(ctx, features.Event{ID: "login-" + strconv.Itoa(i),
				Entities: map[string]string{"user": user, "ip": ip}})
			require.NoError(t, err)
			return r
		}
		for i := 0; i < 5; i++ {
			r := login(i, "u1", "ip1")
			require.True(t, r.Allowed, "login %d", i)
			v, _ := r.Get("user_attempts")
			require.Equal(t, []int64{int64(i + 1), int64(i + 1), int64(i + 1)}, v.Sums)
			v, _ = r.Get("user_login_limit")
			require.EqualValues(t, 4-i, v.Decision.Remaining)
		}
		r := login(5, "u1", "ip1")
		require.False(t, r.Allowed)
		require.Equal(t, []string{"user_login_limit"}, r.RefusedBy)
		require.Greater(t, r.RetryAfter, time.Duration(0))
		v, _ := r.Get("user_attempts")
		require.EqualValues(t, 6, v.Sum, "attempts count refused events too")
		v, _ = r.Get("user_login_limit")
		require.False(t, v.Counted)
		require.EqualValues(t, 5, v.Sum)
		// Another user on the same IP: the IP counts both, and two users.
		r = login(6, "u2", "ip1")
		require.True(t, r.Allowed)
		v, _ = r.Get("ip_attempts")
		require.EqualValues(t, 7, v.Sum)
		v, _ = r.Get("ip_users")
		require.EqualValues(t, 2, v.Sum)
		// A replayed event counts nothing.
		r = login(6, "u2", "ip1")
		require.True(t, r.Duplicate)
		v, _ = r.Get("ip_attempts")
		require.EqualValues(t, 7, v.Sum)
		// Payments: spend sums and its limit, distinct cards per device.
		pay := func(i int, card, device string, amount int64) features.Result {
			r, err := set.At(t0.Add(time.Hour+time.Duration(i)*time.Minute)).Record(ctx, features.Event{ID: "pay-" + strconv.Itoa(i),
				Entities: map[string]string{"card": card, "device": device}, Amount: amount})
			require.NoError(t, err)
			return r
		}
		require.True(t, pay(0, "c1", "d1", 600).Allowed)
		r = pay(1, "c1", "d1", 300)
		require.True(t, r.Allowed)
		v, _ = r.Get("card_spend")
		require.Equal(t, []int64{900, 900}, v.Sums)
		r = pay(2, "c1", "d1", 200)
		require.False(t, r.Allowed, "1100 is over the day's 1000")
		require.Equal(t, []string{"card_spend_limit"}, r.RefusedBy)
		v, _ = r.Get("card_spend")
		require.EqualValues(t, 1100, v.Sum, "the spend sum records the attempt")
		v, _ = r.Get("card_spend_limit")
		require.EqualValues(t, 900, v.Sum)
		require.EqualValues(t, 100, v.Decision.Remaining)
		r = pay(3, "c2", "d1", 10)
		v, _ = r.Get("device_cards")
		require.EqualValues(t, 2, v.Sum)
		// Read: the values now, nothing written. An hour after the logins, only
		// the day windows still hold them.
		keys := scanKeys(t, c, prefix)
		before := dump(t, c, keys...)
		rd, err := set.At(t0.Add(time.Hour+4*time.Minute)).Read(ctx, map[string]string{"user": "u1", "ip": "ip1", "card": "c1", "device": "d1"})
		require.NoError(t, err)
		require.Equal(t, before, dump(t, c, keys...), "Read wrote")
		require.Equal(t, keys, scanKeys(t, c, prefix), "Read made keys")
		want := map[string][]int64{"user_attempts": {0, 0, 6}, "user_login_limit": {0, 0}, "ip_attempts": {0}, "ip_users": {0},
			"card_spend": {1100, 1100}, "card_spend_limit": {900}, "device_cards": {2}}
		require.Len(t, rd.Values, len(want))
		for name, n := range want {
			v, ok := rd.Get(name)
			require.True(t, ok, name)
			require.Equal(t, n, v.Sums, name)
		}
		// An event without an entity leaves its features out.
		r, err = set.At(t0.Add(2*time.Hour)).Record(ctx, features.Event{Entities: map[string]string{"ip": "ip9"}})
		require.NoError(t, err)
		require.Len(t, r.Values, 1, "ip_users needs a user")
	})
}

// TestRecordRace: 45 concurrent callers record a login and a payment each,
// without event ids (an entity's batch takes the script's fast path, and
// concurrent Records share script calls), at one instant, on every backend:
// exactly as many are admitted as the limits allow (5 logins a minute for the
// user, 1,000 a day of spend for the card: 33 payments of 30), and every
// event is counted once (the counts and spend sums the callers see are 1 to
// 45, and 30 to 45 x 30, each once). Then 45 logins with event ids, each sent
// twice at once: each counted once, exactly 5 admitted.
func TestRecordRace(t *testing.T) {
	forEach(t, func(t *testing.T, tg target) {
		srv := newStoreServer(t, tg)
		c := srv.Client(t)
		ctx := ctxT(t)
		set, err := features.New(ctx, c, riskFeatures(), store.WithPrefix(prefixFor(t)), store.WithBackend(tg.backend))
		require.NoError(t, err)
		at := set.At(time.Now().Truncate(time.Hour).Add(-3 * time.Hour))
		const n = 45
		logins, pays := make([]features.Result, n), make([]features.Result, n)
		errs := make(chan error, 2*n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var err error
				logins[i], err = at.Record(ctx, features.Event{Entities: map[string]string{"user": "u1", "ip": "ip" + strconv.Itoa(i)}})
				errs <- err
				pays[i], err = at.Record(ctx, features.Event{Entities: map[string]string{"card": "c1", "device": "d1"}, Amount: 30})
				errs <- err
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
		admitted := func(rs []features.Result) int {
			k := 0
			for _, r := range rs {
				if r.Allowed {
					k++
				}
			}
			return k
		}
		seen := func(rs []features.Result, name string) []int64 {
			var out []int64
			for _, r := range rs {
				v, ok := r.Get(name)
				require.True(t, ok, name)
				out = append(out, v.Sum)
			}
			slices.Sort(out)
			return out
		}
		require.Equal(t, 5, admitted(logins), "logins admitted")
		require.Equal(t, 33, admitted(pays), "payments admitted")
		var counts, spends []int64
		for i := range int64(n) {
			counts, spends = append(counts, i+1), append(spends, 30*(i+1))
		}
		require.Equal(t, counts, seen(logins, "user_attempts"), "each login counted once")
		require.Equal(t, spends, seen(pays, "card_spend"), "each payment counted once")
		for _, name := range []string{"ip_attempts", "ip_users"} {
			require.Equal(t, slices.Repeat([]int64{1}, n), seen(logins, name), name)
		}
		require.Equal(t, slices.Repeat([]int64{1}, n), seen(pays, "device_cards"))
		rd, err := at.Read(ctx, map[string]string{"user": "u1", "card": "c1"})
		require.NoError(t, err)
		v, _ := rd.Get("user_login_limit")
		require.Equal(t, []int64{5, 5}, v.Sums)
		v, _ = rd.Get("card_spend_limit")
		require.Equal(t, []int64{990}, v.Sums)
		// With event ids, each event sent twice at once (a retry racing its
		// first call): 90 callers, 45 events, each counted once, exactly 5
		// admitted, and both answers of an event agree.
		twice := make([][2]features.Result, n)
		errs = make(chan error, 2*n)
		for i := range n {
			for j := range 2 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					var err error
					twice[i][j], err = at.Record(ctx, features.Event{ID: "login-" + strconv.Itoa(i),
						Entities: map[string]string{"user": "u2", "ip": "ip" + strconv.Itoa(i)}})
					errs <- err
				}()
			}
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
		events := 0
		for i, r := range twice {
			require.Equal(t, r[0].Allowed, r[1].Allowed, "the two answers of event %d", i)
			require.True(t, r[0].Duplicate || r[1].Duplicate, "event %d: neither answer is a duplicate", i)
			if r[0].Allowed {
				events++
			}
		}
		require.Equal(t, 5, events, "events admitted")
		rd, err = at.Read(ctx, map[string]string{"user": "u2"})
		require.NoError(t, err)
		v, _ = rd.Get("user_attempts")
		require.Equal(t, []int64{n, n, n}, v.Sums, "each event counted once")
		v, _ = rd.Get("user_login_limit")
		require.Equal(t, []int64{5, 5}, v.Sums)
	})
}

// TestRecordInvalid: feature sets and events that make no sense are refused.
func TestRecordInvalid(t *testing.T) {
	srv := newStoreServer(t, targets[0])
	c := srv.Client(t)
	ctx := ctxT(t)
	w := []store.Window{{Length: time.Minute, Bucket: time.Second}}
	for _, fs := range [][]features.Feature{
		nil,
		{{Name: "a b", Entity: "u", Windows: w}},
		{{Name: "a", Windows: w}},
		{{Name: "a", Entity: "u"}},
		{{Name: "a", Entity: "u", Kind: features.Distinct, Windows: w}},
		{{Name: "a", Entity: "u", Kind: features.Limit, Windows: w}},
		{{Name: "a", Entity: "u", Windows: w}, {Name: "a", Entity: "v", Windows: w}},
	} {
		_, err := features.New(ctx, c, fs)
		require.ErrorIs(t, err, store.ErrInvalid, "%+v", fs)
	}
	set, err := features.New(ctx, c, []features.Feature{{Name: "a", Entity: "u", Windows: w}}, store.WithPrefix(prefixFor(t)))
	require.NoError(t, err)
	_, err = set.Record(ctx, features.Event{Entities: map[string]string{"nope": "x"}})
	require.ErrorIs(t, err, store.ErrInvalid)
	require.True(t, strings.HasPrefix(err.Error(), "features: "), err.Error())
}

func newStoreServer(t *testing.T, tg target) *harness.Server { return harness.Shared(t, tg.kind) }

func prefixFor(t *testing.T) string { return harness.Prefix(t) }

// scanKeys lists the keys under a prefix, sorted.
func scanKeys(t *testing.T, c rueidis.Client, prefix string) []string {
	var keys []string
	var cursor uint64
	for {
		e, err := c.Do(ctxT(t), c.B().Scan().Cursor(cursor).Match(prefix+"*").Count(1000).Build()).AsScanEntry()
		require.NoError(t, err)
		keys = append(keys, e.Elements...)
		if cursor = e.Cursor; cursor == 0 {
			break
		}
	}
	slices.Sort(keys)
	return keys
}

// TestRiskExample runs examples/risk as a process against a real server: the
// fourth login in a minute is refused, the redelivered event counts nothing,
// the late payment is refused by the day's spend limit, and the card's
// largest payment of the day is still 900.
func TestRiskExample(t *testing.T) {
	srv := harness.Shared(t, harness.Redis70)
	out, err := exec.Command(harness.Binary(t, "./examples/risk"), "--addr", srv.URL()).CombinedOutput()
	require.NoError(t, err, "%s", out)
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	require.Len(t, lines, 12, "%s", out)
	require.Regexp(t, `\(4th in a minute\)\s+REFUSE .*refused by login_limit, retry in 40s`, lines[4])
	require.Regexp(t, `redelivered\s+dup\s+logins/1m=4 `, lines[5])
	require.Regexp(t, `arrives 4 min late\)\s+REFUSE .*spend/1h=2100 .*largest_payment/1d=900; refused by spend_limit`, lines[11])
}

// TestRecordOneCall: on a server that is not a cluster, a feature set's
// Record over two entities, with a distinct count on each, in stores of two
// window shapes, is one script call carrying both entities' batches; so is
// an Apply of batches of several entities. (On a cluster it is one call per
// slot: TestCluster.)
func TestRecordOneCall(t *testing.T) {
	forEach(t, func(t *testing.T, tg target) {
		log := &opLog{}
		srv := harness.Shared(t, tg.kind)
		c := srv.Client(t)
		ctx := ctxT(t)
		minute := store.Window{Length: time.Minute, Bucket: time.Second}
		hour := store.Window{Length: time.Hour, Bucket: time.Minute}
		set, err := features.New(ctx, c, []features.Feature{
			{Name: "logins", Entity: "user", Kind: features.Count, Windows: []store.Window{minute, hour}},
			{Name: "ips", Entity: "user", Kind: features.Distinct, Of: "ip", Windows: []store.Window{hour}},
			{Name: "attempts", Entity: "ip", Kind: features.Count, Windows: []store.Window{minute}},
			{Name: "users", Entity: "ip", Kind: features.Distinct, Of: "user", Windows: []store.Window{hour}},
		}, store.WithPrefix(harness.Prefix(t)), store.WithBackend(tg.backend), store.WithObserver(log))
		require.NoError(t, err)
		for i := range 3 {
			res, err := set.Record(ctx, features.Event{Entities: map[string]string{"user": "42", "ip": "10.0.0." + strconv.Itoa(i)}})
			require.NoError(t, err)
			require.NotEmpty(t, res.Values)
			require.Equal(t, []int{1}, log.takeCalls(), "event %d: one script call, one operation: the event of two batches (user, ip)", i)
		}
		s, _ := newStore(t, tg, minute, store.WithObserver(log))
		var batches []store.Batch
		for _, e := range []string{"a", "b", "c"} {
			u := s.Entity(e)
			batches = append(batches, store.Batch{Ops: []store.Op{{Store: u, Key: "n", Delta: 1}, {Store: u, Key: "d", Kind: store.OpDistinct, Members: []string{e}}}})
		}
		res, err := store.Apply(ctx, batches...)
		require.NoError(t, err)
		require.Len(t, res, 3)
		for _, r := range res {
			require.EqualValues(t, 1, r.Values[0].Sum)
			require.EqualValues(t, 1, r.Values[1].Sum)
		}
		require.Equal(t, []int{3}, log.takeCalls(), "one script call of three batches")
	})
}

// TestRecordValuesInSetOrder: Result.Values lists the features in the order
// the set declares them, whatever their entities, for Record and for Read;
// and Read, which writes nothing, marks nothing counted.
func TestRecordValuesInSetOrder(t *testing.T) {
	minute := []store.Window{{Length: time.Minute, Bucket: time.Second}}
	tg := targets[0]
	ctx := ctxT(t)
	srv := newStoreServer(t, tg)
	c := srv.Client(t)
	prefix := prefixFor(t)
	set, err := features.New(ctx, c, []features.Feature{
		{Name: "logins", Entity: "user", Kind: features.Count, Windows: minute},
		{Name: "login_limit", Entity: "user", Kind: features.Limit, Windows: minute, Limits: []int64{5}},
		{Name: "ip_count", Entity: "ip", Kind: features.Count, Windows: minute},
		{Name: "ip_users", Entity: "ip", Kind: features.Distinct, Of: "user", Windows: minute},
		{Name: "agents", Entity: "agent", Kind: features.Count, Windows: minute},
	}, store.WithPrefix(prefix))
	require.NoError(t, err)
	names := func(r features.Result) []string {
		var out []string
		for _, v := range r.Values {
			out = append(out, v.Feature)
		}
		return out
	}
	ents := map[string]string{"user": "u", "ip": "1.2.3.4", "agent": "x"}
	r, err := set.Record(ctx, features.Event{Entities: ents})
	require.NoError(t, err)
	require.Equal(t, []string{"logins", "login_limit", "ip_count", "ip_users", "agents"}, names(r))
	keys := scanKeys(t, c, prefix)
	before := dump(t, c, keys...)
	rd, err := set.Read(ctx, ents)
	require.NoError(t, err)
	require.Equal(t, names(r), names(rd))
	for _, v := range rd.Values {
		require.False(t, v.Counted, "Read marks %s counted", v.Feature)
	}
	require.Equal(t, before, dump(t, c, keys...), "Read wrote")
}

// TestRecordEmptyEntity: an entity whose value is empty is the same as one
// the event does not have: no feature keyed on it counts, no distinct count
// counts it, and no key names it; an event whose every entity is empty is
// refused with ErrInvalid.
func TestRecordEmptyEntity(t *testing.T) {
	minute := []store.Window{{Length: time.Minute, Bucket: time.Second}}
	forEach(t, func(t *testing.T, tg target) {
		ctx := ctxT(t)
		srv := newStoreServer(t, tg)
		c := srv.Client(t)
		prefix := prefixFor(t)
		set, err := features.New(ctx, c, []features.Feature{
			{Name: "card_uses", Entity: "card", Kind: features.Count, Windows: minute},
			{Name: "device_cards", Entity: "device", Kind: features.Distinct, Of: "card", Windows: minute},
			{Name: "device_uses", Entity: "device", Kind: features.Count, Windows: minute},
		}, store.WithPrefix(prefix), store.WithBackend(tg.backend))
		require.NoError(t, err)
		r, err := set.Record(ctx, features.Event{Entities: map[string]string{"card": "", "device": "d1"}})
		require.NoError(t, err)
		_, ok := r.Get("card_uses")
		require.False(t, ok, "a feature keyed on an empty card")
		_, ok = r.Get("device_cards")
		require.False(t, ok, "an empty card counted as a distinct card")
		v, ok := r.Get("device_uses")
		require.True(t, ok)
		require.EqualValues(t, 1, v.Sum)
		r, err = set.Record(ctx, features.Event{Entities: map[string]string{"card": "c1", "device": "d1"}})
		require.NoError(t, err)
		v, _ = r.Get("device_cards")
		require.EqualValues(t, 1, v.Sum, "only c1 is a card")
		for _, k := range scanKeys(t, c, prefix) {
			require.False(t, strings.Contains(k, "card:}"), "a key for an empty card: %s", k)
		}
		_, err = set.Record(ctx, features.Event{Entities: map[string]string{"card": "", "device": ""}})
		require.ErrorIs(t, err, store.ErrInvalid)
	})
}
