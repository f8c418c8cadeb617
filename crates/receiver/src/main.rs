//! `indexnow-receiver [--listen 127.0.0.1:PORT]`: a local IndexNow endpoint (see the library's
//! documentation for what it checks and how it is scripted). Prints its endpoint URL on the
//! first line of standard output, then serves until killed.

fn main() {
    let mut args = std::env::args().skip(1);
    let mut listen = "127.0.0.1:0".to_string();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--listen" => listen = args.next().unwrap_or_else(|| usage()),
            _ => usage(),
        }
    }
    let receiver = indexnow_receiver::Receiver::start(&listen).unwrap_or_else(|e| {
        eprintln!("indexnow-receiver: cannot listen on {listen}: {e}");
        std::process::exit(1);
    });
    println!("{}", receiver.endpoint());
    loop {
        std::thread::park();
    }
}

fn usage() -> ! {
    eprintln!("usage: indexnow-receiver [--listen 127.0.0.1:PORT]");
    std::process::exit(2);
}
