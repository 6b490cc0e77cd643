import { Clock, Context, Duration, Effect, Layer } from "effect"
import { TestClock } from "effect/testing"

/**
 * TestClock, with every sleep ending on a whole millisecond, as the live clock reads (`Date.now()`):
 * for every test that runs the cluster and its entities on TestClock.
 * TestClock shows a woken sleep's own end as the time while the sleeper runs, so a sleep of a
 * fractional length (a jittered schedule's) put it at T0 + 30,062.5 ms, and an entity writing
 * that reading to a bigint column died ("invalid input syntax for type bigint"). Restarted after
 * a sleep on this clock, it missed the deadline's alert when the test had stopped moving the
 * clock (seen as "5 alerts" where 6 were due, on a loaded machine).
 */
export const testClockLayer = Layer.effectContext(Effect.map(Layer.build(TestClock.layer()), (context) => {
  const clock = Context.get(context, Clock.Clock)
  // Spread: TestClock.adjust finds its clock as the Clock service, so the wrapper keeps its methods.
  const wholeMillis: Clock.Clock = {
    ...clock,
    sleep: (duration) => clock.sleep(Duration.millis(Math.ceil(Duration.toMillis(duration))))
  }
  return Context.add(context, Clock.Clock, wholeMillis)
}))
