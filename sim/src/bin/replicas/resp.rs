//! A writer of raw Redis commands, for the hostile member of a fleet: it
//! writes any key, type, tally or message, as anything that can reach the
//! store could. Replies are read and dropped.

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A connection that sends commands and does not wait for their replies.
pub(crate) struct Resp {
    writer: tokio::net::tcp::OwnedWriteHalf,
    _reader: tokio::task::JoinHandle<()>,
}

impl Resp {
    /// Connects to the Redis on `127.0.0.1:port`.
    pub(crate) async fn connect(port: u16) -> std::io::Result<Self> {
        let stream = TcpStream::connect(("127.0.0.1", port)).await?;
        let (mut reader, writer) = stream.into_split();
        let reader = tokio::spawn(async move {
            let mut buffer = vec![0; 64 * 1024];
            while matches!(reader.read(&mut buffer).await, Ok(1..)) {}
        });
        Ok(Self { writer, _reader: reader })
    }

    /// Sends many commands in one write.
    pub(crate) async fn send_all(&mut self, commands: &[Vec<String>]) -> std::io::Result<()> {
        let mut bytes = Vec::new();
        for command in commands {
            let words: Vec<&str> = command.iter().map(String::as_str).collect();
            bytes.extend(encode(&words));
        }
        self.writer.write_all(&bytes).await
    }
}

/// A command as RESP writes it: an array of bulk strings.
fn encode(words: &[&str]) -> Vec<u8> {
    let mut bytes = format!("*{}\r\n", words.len()).into_bytes();
    for word in words {
        bytes.extend(format!("${}\r\n", word.len()).into_bytes());
        bytes.extend(word.as_bytes());
        bytes.extend(b"\r\n");
    }
    bytes
}
