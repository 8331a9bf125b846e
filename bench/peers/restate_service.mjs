// The Restate side of bench/peers/run.mjs: one virtual object per conversation whose handler is one
// turn. Restate journals the invocation (the user message) in its log before the handler runs, the
// echo "model step" as a ctx.run entry, and the handler's result (the reply); the client's HTTP call
// to the ingress returns once the result is committed. Listens on $PORT (HTTP/2, the SDK's default).
// restate-sdk 1.17 calls Promise.withResolvers (Node 22); Node 20 lacks it: the one-line standard
// polyfill, set before the SDK loads.
Promise.withResolvers ??= function () {
  let resolve, reject;
  const promise = new this((a, b) => { resolve = a; reject = b; });
  return { promise, resolve, reject };
};
const restate = await import("@restatedev/restate-sdk");

const conv = restate.object({
  name: "conv",
  handlers: {
    async turn(ctx, text) {
      const reply = await ctx.run("echo", () => ({ text }));
      return reply;
    },
  },
});

restate.endpoint().bind(conv).listen(Number(process.env.PORT || 29080));
