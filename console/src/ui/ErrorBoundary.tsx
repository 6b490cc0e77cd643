import { Component, type ComponentChildren } from "preact"

/** A fault in a page shows what went wrong instead of a blank console. */
export class ErrorBoundary extends Component<{ children: ComponentChildren; resetKey: string }, { error: Error | undefined; key: string }> {
  override state = { error: undefined as Error | undefined, key: this.props.resetKey }

  static override getDerivedStateFromError(error: unknown) {
    return { error: error instanceof Error ? error : new Error(String(error)) }
  }

  override componentDidUpdate() {
    // Another page: try again.
    if (this.state.error !== undefined && this.state.key !== this.props.resetKey) this.setState({ error: undefined, key: this.props.resetKey })
    else if (this.state.key !== this.props.resetKey) this.setState({ key: this.props.resetKey })
  }

  override render() {
    if (this.state.error === undefined) return this.props.children
    return (
      <div class="notice error" role="alert">
        <h2>This page failed</h2>
        <p>{this.state.error.message}</p>
        <button type="button" onClick={() => this.setState({ error: undefined })}>
          Try again
        </button>{" "}
        <button type="button" onClick={() => location.reload()}>
          Reload
        </button>
      </div>
    )
  }
}
