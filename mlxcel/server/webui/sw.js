// Served at /sw.js. This page registers no service worker, but a browser that used
// llama-server's UI at this address kept the one that UI registered, and goes on showing
// that UI from its cache after mlxcel took llama-server's place. That worker's update
// check fetches /sw.js and gets this one: it unregisters itself, empties the caches and
// reloads the pages it controlled (llama-server answers the same when its UI is replaced).
self.addEventListener("install", () => self.skipWaiting());
self.addEventListener("activate", (event) => event.waitUntil((async () => {
  await self.registration.unregister();
  for (const name of await caches.keys()) await caches.delete(name);
  for (const client of await self.clients.matchAll({type: "window"})) client.navigate(client.url);
})()));
