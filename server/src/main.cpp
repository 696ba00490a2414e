// delayq-server: placeholder while the server is built (docs/server.md).
int main() { return 0; }
